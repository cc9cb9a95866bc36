package docker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type kind int

const (
	gauge kind = iota
	counter
	histogram
)

// metrics is every series the dashboard may chart. When a metric is added,
// renamed or removed, update this table and the dashboard together: a panel
// that names a series no member exports draws an empty graph in production
// and nobody notices until the day it was needed.
var metrics = map[string]kind{
	"corenode_raft_has_leader":           gauge,
	"corenode_raft_is_leader":            gauge,
	"corenode_raft_leader_changes_total": counter,
	"corenode_raft_term":                 gauge,
	"corenode_raft_commit_index":         gauge,
	"corenode_raft_applied_index":        gauge,

	"corenode_proposals_total":        counter,
	"corenode_proposals_failed_total": counter,
	"corenode_proposal_apply_seconds": histogram,

	"corenode_disk_fsync_seconds": histogram,
	"corenode_disk_writable":      gauge,
	"corenode_kv_db_size_bytes":   gauge,

	"corenode_grpc_requests_total":  counter,
	"corenode_grpc_request_seconds": histogram,

	"corenode_kv_keys":     gauge,
	"corenode_kv_revision": gauge,

	"corenode_lease_live":                     gauge,
	"corenode_lease_keepalives_total":         counter,
	"corenode_lease_expired_total":            counter,
	"corenode_lease_checkpoint_entries_total": counter,
	"corenode_lease_checkpoint_bytes_total":   counter,
	"corenode_lease_grants_total":             counter,
	"corenode_lease_revokes_total":            counter,
	"corenode_lease_expiry_lag_seconds":       histogram,
}

// rateFuncs are the PromQL functions that make sense of a counter; charting
// a raw counter shows a line that only climbs and resets on restart.
var rateFuncs = []string{"rate", "irate", "increase"}

func readDeploy(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", filepath.FromSlash(rel)))
	if err != nil {
		t.Fatalf("reading deploy/%s: %v", rel, err)
	}
	return string(b)
}

type dashboard struct {
	Title         string
	UID           string
	SchemaVersion int
	Templating    struct {
		List []struct {
			Name  string
			Type  string
			Query any
		}
	}
	Panels []panel
}

type panel struct {
	ID         int
	Type       string
	Title      string
	Datasource struct{ Type, UID string }
	GridPos    struct{ X, Y, W, H int }
	Targets    []struct {
		RefID string
		Expr  string
	}
}

var (
	metricName = regexp.MustCompile(`corenode_[a-z0-9_]+`)
	variable   = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
	funcName   = regexp.MustCompile(`([a-z_]+)\s*$`)
)

// TestDashboard checks deploy/grafana/corenode.json without Grafana: it is a
// dashboard Grafana can import, and every PromQL query in it names series
// from the table above and uses them the way their kind allows.
func TestDashboard(t *testing.T) {
	raw := readDeploy(t, "grafana/corenode.json")
	var d dashboard
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatalf("deploy/grafana/corenode.json is not valid JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 {
		t.Errorf("dashboard needs title, uid and schemaVersion; got %q %q %d", d.Title, d.UID, d.SchemaVersion)
	}
	if len(d.Panels) == 0 {
		t.Fatal("dashboard has no panels")
	}

	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if q, ok := v.Query.(string); ok {
			for _, name := range metricName.FindAllString(q, -1) {
				if _, ok := metrics[name]; !ok {
					t.Errorf("template variable %q queries %s, which is not in the metrics table", v.Name, name)
				}
			}
		}
	}
	checkVars := func(where, s string) {
		t.Helper()
		for _, m := range variable.FindAllStringSubmatch(s, -1) {
			// $__rate_interval and friends are Grafana's own.
			if !vars[m[1]] && !strings.HasPrefix(m[1], "__") {
				t.Errorf("%s uses $%s, which the dashboard's templating does not define", where, m[1])
			}
		}
	}

	charted := map[string]bool{}
	ids := map[int]string{}
	for _, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.Title == "" || p.Type == "" {
			t.Errorf("%s: needs a title and a type", where)
		}
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("%s: id already used by %q; Grafana keeps only one", where, prev)
		}
		ids[p.ID] = p.Title
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("%s: gridPos %+v does not fit Grafana's 24-column grid", where, p.GridPos)
		}
		if p.Datasource.Type != "prometheus" {
			t.Errorf("%s: datasource type %q, want prometheus", where, p.Datasource.Type)
		}
		checkVars(where+" datasource", p.Datasource.UID)
		if len(p.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.RefID == "" || refs[q.RefID] {
				t.Errorf("%s: refId %q missing or repeated", where, q.RefID)
			}
			refs[q.RefID] = true
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("%s: empty expr", where)
				continue
			}
			if err := balanced(q.Expr); err != nil {
				t.Errorf("%s: %q: %v", where, q.Expr, err)
			}
			checkVars(where, q.Expr)
			for _, loc := range metricName.FindAllStringIndex(q.Expr, -1) {
				name := q.Expr[loc[0]:loc[1]]
				base, k, err := resolve(name)
				if err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				charted[base] = true
				if k == counter || k == histogram {
					if fn := enclosingFunc(q.Expr[:loc[0]]); !slices.Contains(rateFuncs, fn) {
						at := "at the top level"
						if fn != "" {
							at = "inside " + fn + "()"
						}
						t.Errorf("%s: %s is a %s, so wrap it in rate() or increase() (it is %s)", where, name, kindName(k), at)
					}
				}
			}
		}
	}
	// The table is what operators are promised they can see; a metric in it
	// with no panel is one nobody will look at.
	for name := range metrics {
		if !charted[name] {
			t.Errorf("%s is in the metrics table but no panel charts it", name)
		}
	}
}

// resolve maps a name in a query to its metric: histograms are only
// queryable through their _bucket, _count and _sum series.
func resolve(name string) (string, kind, error) {
	if k, ok := metrics[name]; ok {
		if k == histogram {
			return name, k, fmt.Errorf("%s is a histogram: query %s_bucket, _count or _sum", name, name)
		}
		return name, k, nil
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if k, ok := metrics[base]; ok && k == histogram {
				return base, histogram, nil
			}
		}
	}
	return name, 0, fmt.Errorf("%s is not in the metrics table (a typo, or a new metric to add to the table)", name)
}

func kindName(k kind) string {
	return [...]string{"gauge", "counter", "histogram"}[k]
}

// enclosingFunc names the function whose unclosed parenthesis is nearest
// before the end of prefix, or "" at the top level.
func enclosingFunc(prefix string) string {
	depth := 0
	for i := len(prefix) - 1; i >= 0; i-- {
		switch prefix[i] {
		case ')':
			depth++
		case '(':
			if depth == 0 {
				if m := funcName.FindStringSubmatch(prefix[:i]); m != nil {
					return m[1]
				}
				return ""
			}
			depth--
		}
	}
	return ""
}

// balanced catches the commonest broken query, an unclosed bracket, without
// a PromQL parser (which would be a new module).
func balanced(expr string) error {
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	var stack []rune
	inString := false
	for _, r := range expr {
		if r == '"' {
			inString = !inString
			continue
		}
		if inString {
			continue
		}
		switch r {
		case '(', '[', '{':
			stack = append(stack, r)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if inString {
		return fmt.Errorf("unterminated string")
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %q", stack[len(stack)-1])
	}
	return nil
}

// composeDefaultPorts reads the host client ports the compose files publish
// by default, service -> port, from entries like
// "127.0.0.1:${M1_CLIENT_PORT:-2379}:2379". It also checks that nothing is
// published beyond loopback: the members have no authentication.
func composeDefaultPorts(t *testing.T, file string) map[string]string {
	t.Helper()
	text := readDeploy(t, file)
	ports := map[string]string{}
	entry := regexp.MustCompile(`"([^"]*):2379"`)
	def := regexp.MustCompile(`^127\.0\.0\.1:\$\{(M(\d)_CLIENT_PORT):-(\d+)\}$`)
	for _, line := range strings.Split(text, "\n") {
		if !strings.Contains(line, "ports:") {
			continue
		}
		for _, m := range entry.FindAllStringSubmatch(line, -1) {
			d := def.FindStringSubmatch(m[1])
			if d == nil {
				t.Errorf("deploy/%s: client port %s is not 127.0.0.1:${Mn_CLIENT_PORT:-port}: publish on loopback only, overridable", file, m[1])
				continue
			}
			ports["m"+d[2]] = d[3]
		}
	}
	return ports
}

// TestComposeFiles checks what the compose files promise without running
// Docker; TestComposeCluster runs them.
func TestComposeFiles(t *testing.T) {
	three := composeDefaultPorts(t, "docker-compose.yml")
	five := composeDefaultPorts(t, "docker-compose.5.yml")
	for _, m := range []string{"m1", "m2", "m3"} {
		if three[m] == "" {
			t.Errorf("docker-compose.yml publishes no client port for %s", m)
		}
	}
	for _, m := range []string{"m4", "m5"} {
		if five[m] == "" {
			t.Errorf("docker-compose.5.yml publishes no client port for %s", m)
		}
	}
	seen := map[string]string{}
	for _, ports := range []map[string]string{three, five} {
		for m, p := range ports {
			if other, dup := seen[p]; dup && other != m {
				t.Errorf("%s and %s both default to host port %s", m, other, p)
			}
			seen[p] = m
		}
	}

	// Each member advertises the client URL the host reaches it at, so
	// etcdctl's --cluster commands work from the host.
	join := composeDefaultPorts(t, "docker-compose.join.yml")
	advertise := regexp.MustCompile(`CORENODE_ADVERTISE_CLIENT_URLS:\s*(\S+)`)
	for file, ports := range map[string]map[string]string{"docker-compose.yml": three, "docker-compose.5.yml": five, "docker-compose.join.yml": join} {
		ms := advertise.FindAllStringSubmatch(readDeploy(t, file), -1)
		if len(ms) != len(ports) {
			t.Errorf("deploy/%s: %d advertised client URLs for %d published ports", file, len(ms), len(ports))
		}
		for _, m := range ms {
			ok := false
			for name, p := range ports {
				ok = ok || m[1] == fmt.Sprintf("http://127.0.0.1:${M%s_CLIENT_PORT:-%s}", name[1:], p)
			}
			if !ok {
				t.Errorf("deploy/%s: advertised client URL %s is not a published host port", file, m[1])
			}
		}
	}
	for _, m := range []string{"m4", "m5"} {
		if join[m] != five[m] {
			t.Errorf("docker-compose.join.yml publishes %s on %s, docker-compose.5.yml on %s", m, join[m], five[m])
		}
		text := readDeploy(t, "docker-compose.join.yml")
		want := fmt.Sprintf("CORENODE_INITIAL_CLUSTER: m1=http://m1:2380,m2=http://m2:2380,m3=http://m3:2380,%s=http://%s:2380", m, m)
		if !strings.Contains(text, want) {
			t.Errorf("docker-compose.join.yml: %s does not join with %s", m, want)
		}
	}

	cluster := regexp.MustCompile(`CORENODE_INITIAL_CLUSTER:\s*(\S+)`)
	for file, want := range map[string]int{"docker-compose.yml": 3, "docker-compose.5.yml": 5} {
		text := readDeploy(t, file)
		if strings.Contains(text, "\t") {
			t.Errorf("deploy/%s contains a tab, which YAML forbids in indentation", file)
		}
		ms := cluster.FindAllStringSubmatch(text, -1)
		if len(ms) == 0 {
			t.Errorf("deploy/%s sets no CORENODE_INITIAL_CLUSTER", file)
		}
		for _, m := range ms {
			if m[1] == "*five" {
				continue
			}
			var members []string
			for i := 1; i <= want; i++ {
				members = append(members, fmt.Sprintf("m%d=http://m%d:2380", i, i))
			}
			if m[1] != strings.Join(members, ",") {
				t.Errorf("deploy/%s: initial cluster %s, want %s", file, m[1], strings.Join(members, ","))
			}
		}
	}
}

// TestPrometheusConfig checks deploy/prometheus.yml textually (no YAML module
// is a dependency of this one): it scrapes /metrics on the client ports the
// 3-member compose file publishes by default.
func TestPrometheusConfig(t *testing.T) {
	text := readDeploy(t, "prometheus.yml")
	if strings.Contains(text, "\t") {
		t.Error("deploy/prometheus.yml contains a tab, which YAML forbids in indentation")
	}
	var body []string // the file without comments
	for _, line := range strings.Split(text, "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) != "" {
			body = append(body, line)
		}
	}
	conf := strings.Join(body, "\n")
	for _, want := range []string{"scrape_configs:", "job_name: corenode"} {
		if !regexp.MustCompile(`(?m)^\s*(- )?` + regexp.QuoteMeta(want)).MatchString(conf) {
			t.Errorf("deploy/prometheus.yml has no %q", want)
		}
	}
	if m := regexp.MustCompile(`metrics_path:\s*(\S+)`).FindStringSubmatch(conf); m != nil && m[1] != "/metrics" {
		t.Errorf("deploy/prometheus.yml scrapes %s; members serve /metrics", m[1])
	}
	tm := regexp.MustCompile(`targets:\s*\[([^\]]*)\]`).FindStringSubmatch(conf)
	if tm == nil {
		t.Fatal("deploy/prometheus.yml has no targets: [...] list")
	}
	var targets []string
	for _, s := range strings.Split(tm[1], ",") {
		targets = append(targets, strings.Trim(strings.TrimSpace(s), `"'`))
	}
	var want []string
	for _, m := range []string{"m1", "m2", "m3"} {
		if p := composeDefaultPorts(t, "docker-compose.yml")[m]; p != "" {
			want = append(want, "127.0.0.1:"+p)
		}
	}
	if !slices.Equal(targets, want) {
		t.Errorf("deploy/prometheus.yml targets %v, want the compose cluster's client ports %v", targets, want)
	}
}

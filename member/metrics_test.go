package member_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// scrape reads a member's /metrics into series -> value, keyed by the text
// form's name{labels}.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetrics checks that /metrics reports what the member did: the series
// the Grafana dashboard charts exist and move with the traffic.
func TestMetrics(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(i int, cfg *member.Config) {
		cfg.Metrics = prometheus.NewRegistry()
	}))
	leader := c.WaitLeader()
	follower := (leader + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli := c.Client(follower)
	const puts = 10
	for i := range puts {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Get(ctx, "k0"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Grant(ctx, 10); err != nil {
		t.Fatal(err)
	}

	lm := scrape(t, c.ClientURL(leader))
	fm := scrape(t, c.ClientURL(follower))
	atLeast := func(m map[string]float64, series string, min float64) {
		t.Helper()
		v, ok := m[series]
		if !ok {
			t.Errorf("no series %s", series)
		} else if v < min {
			t.Errorf("%s = %v, want at least %v", series, v, min)
		}
	}
	equal := func(m map[string]float64, series string, want float64) {
		t.Helper()
		if v, ok := m[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	equal(lm, "corenode_raft_is_leader", 1)
	equal(fm, "corenode_raft_is_leader", 0)
	equal(fm, "corenode_raft_has_leader", 1)
	atLeast(lm, "corenode_raft_term", 1)
	atLeast(lm, "corenode_raft_leader_changes_total", 1)
	atLeast(lm, "corenode_raft_commit_index", puts)
	atLeast(fm, "corenode_raft_applied_index", puts)
	atLeast(lm, "corenode_proposals_total", puts+1)
	equal(lm, "corenode_proposals_failed_total", 0)
	atLeast(lm, "corenode_proposal_apply_seconds_count", puts+1)
	atLeast(lm, "corenode_disk_fsync_seconds_count", 1)
	atLeast(fm, "corenode_disk_fsync_seconds_count", 1)
	atLeast(fm, "corenode_kv_db_size_bytes", 1)
	equal(fm, "corenode_kv_keys", puts)
	atLeast(fm, "corenode_kv_revision", puts+1)
	equal(fm, `corenode_grpc_requests_total{code="OK",method="/etcdserverpb.KV/Put"}`, puts)
	equal(fm, `corenode_grpc_request_seconds_count{method="/etcdserverpb.KV/Range"}`, 1)
	equal(lm, "corenode_lease_live", 1)
	// Counted once, by the member that served the client (a grant it
	// forwarded is not counted again by the leader).
	equal(fm, "corenode_lease_grants_total", 1)
	equal(lm, "corenode_lease_grants_total", 0)
	if _, ok := lm[`corenode_lease_expiry_lag_seconds_bucket{le="0.1"}`]; !ok {
		t.Error("no lease expiry lag histogram")
	}

	t.Run("dashboard charts only series that exist", func(t *testing.T) {
		// Between them, the leader and the follower the client used have
		// every series (labelled ones appear on first use).
		names := map[string]bool{}
		for _, m := range []map[string]float64{lm, fm} {
			for series := range m {
				name, _, _ := strings.Cut(series, "{")
				names[name] = true
			}
		}
		raw, err := os.ReadFile("../deploy/grafana/corenode.json")
		if err != nil {
			t.Fatal(err)
		}
		var dash struct {
			Panels []struct {
				Title   string
				Targets []struct{ Expr string }
			}
		}
		if err := json.Unmarshal(raw, &dash); err != nil {
			t.Fatalf("dashboard JSON: %v", err)
		}
		used := 0
		for _, p := range dash.Panels {
			for _, target := range p.Targets {
				for _, name := range regexp.MustCompile(`corenode_[a-z_]+`).FindAllString(target.Expr, -1) {
					used++
					if !names[name] {
						t.Errorf("panel %q uses %s, which no member exports", p.Title, name)
					}
				}
			}
		}
		if used < 20 {
			t.Errorf("dashboard uses only %d corenode series", used)
		}
	})
}

// TestPprofOnlyWhenEnabled checks --enable-pprof: profiles are served on
// the client URL of a member that enables them, and nowhere else.
func TestPprofOnlyWhenEnabled(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(i int, cfg *member.Config) {
		cfg.EnablePprof = i == 0
	}))
	c.WaitLeader()
	for i, want := range []int{http.StatusOK, http.StatusNotFound} {
		resp, err := http.Get(c.ClientURL(i) + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, 512)
		n, _ := resp.Body.Read(body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("member %d: /debug/pprof/goroutine answered %d, want %d", i, resp.StatusCode, want)
		}
		if want == http.StatusOK && !strings.Contains(string(body[:n]), "goroutine profile") {
			t.Fatalf("member %d: not a goroutine profile: %q", i, body[:n])
		}
	}
}

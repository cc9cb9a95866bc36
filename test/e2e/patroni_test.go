package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/testenv"
)

// Patroni on corenode, as a new user would run it: Debian's patroni and
// postgresql, Patroni's etcd3 settings pointed at three corenode members.
// Patroni speaks etcd's JSON gateway (/version, /v3/kv/..., /v3/lease/...,
// a streaming /v3/watch), so this is the gateway under a real workload.

// patroniTTL is Patroni's leader-key lease, in seconds: a new primary must
// be elected within it plus a few loop_waits of the old one's death.
const patroniTTL = 10

type patroni struct {
	name     string
	apiPort  int
	pgPort   int
	dataDir  string
	config   string
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{}
	killedAt time.Time
}

// requirePatroni returns the PostgreSQL bin dir, and fails in CI or skips
// elsewhere when Patroni or PostgreSQL is missing (scripts/test installs
// both from Debian's packages).
func requirePatroni(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		testenv.Unavailable(t, what+": install Debian's patroni and postgresql, or run scripts/test, which does")
	}
	for _, tool := range []string{"patroni", "patronictl", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool + " is not on PATH")
		}
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		missing("no PostgreSQL server under /usr/lib/postgresql/*/bin")
	}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		if _, err := user.Lookup("postgres"); err != nil {
			missing("running as root and there is no postgres user to run PostgreSQL as")
		}
		if _, err := exec.LookPath("setpriv"); err != nil {
			missing("setpriv (util-linux) is not on PATH")
		}
	}
	return filepath.Dir(bins[len(bins)-1])
}

func TestPatroni(t *testing.T) {
	binDir := requirePatroni(t)
	bin := buildBinary(t)
	c := startCluster(t, bin)
	var hosts []string
	for _, ep := range c.endpoints() {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}

	// Every file Patroni and PostgreSQL touch lives in a directory the
	// postgres user owns; t.TempDir's parents are private to root.
	dir, err := os.MkdirTemp("", "corenode-patroni-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, _ := user.Lookup("postgres")
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	ports := freePorts(t, 6)
	var members []*patroni
	for i := range 3 {
		p := &patroni{
			name:    fmt.Sprintf("pg%d", i+1),
			apiPort: ports[2*i],
			pgPort:  ports[2*i+1],
		}
		p.dataDir = filepath.Join(dir, p.name)
		p.config = filepath.Join(dir, p.name+".yml")
		p.logPath = filepath.Join(dir, p.name+".log")
		if err := os.WriteFile(p.config, []byte(patroniConfig(p, hosts, binDir, dir)), 0o644); err != nil {
			t.Fatal(err)
		}
		if uid >= 0 {
			os.Chown(p.config, uid, gid)
		}
		members = append(members, p)
	}
	t.Cleanup(func() {
		stopPatroni(t, members)
		if t.Failed() {
			for _, p := range members {
				if b, err := os.ReadFile(p.logPath); err == nil {
					t.Logf("--- %s log (last 3000 bytes):\n%s", p.name, tail(b, 3000))
				}
			}
		}
	})
	for _, p := range members {
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
	}

	// Sample every member's own view of its role for the whole test: two
	// members that both say they are primary at once is a split brain.
	roles := newRoleWatch(members)
	defer roles.stop()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary := waitPrimary(t, ctx, members, nil, 90*time.Second)
	t.Logf("%s is primary", primary.name)
	waitList(t, ctx, members[0], 3)

	psql(t, primary, "CREATE TABLE corenode_e2e (id int PRIMARY KEY, note text); INSERT INTO corenode_e2e VALUES (1, 'before failover')")
	for _, p := range members {
		if p != primary {
			waitRow(t, ctx, p, 1)
		}
	}

	// Kill the primary's Patroni and PostgreSQL at once: its lease can no
	// longer be kept alive, corenode expires it after the TTL, and one of
	// the replicas takes over.
	killed := time.Now()
	primary.kill(t)
	next := waitPrimary(t, ctx, members, primary, time.Duration(patroniTTL)*time.Second+20*time.Second)
	t.Logf("%s is primary %v after the kill (Patroni's ttl is %ds)", next.name, time.Since(killed).Round(time.Millisecond), patroniTTL)
	psql(t, next, "INSERT INTO corenode_e2e VALUES (2, 'after failover')")
	for _, p := range members {
		if p != primary && p != next {
			waitRow(t, ctx, p, 2)
		}
	}
	waitList(t, ctx, next, 2)

	if both := roles.stop(); both != "" {
		t.Fatalf("two members reported themselves primary at once: %s", both)
	}
	t.Logf("%d role samples, never two primaries", roles.samples)
}

func patroniConfig(p *patroni, hosts []string, binDir, dir string) string {
	return fmt.Sprintf(`scope: corenode-e2e
namespace: /service/
name: %[1]s
restapi:
  listen: 127.0.0.1:%[2]d
  connect_address: 127.0.0.1:%[2]d
etcd3:
  hosts: %[3]s
bootstrap:
  dcs:
    ttl: %[8]d
    loop_wait: 1
    retry_timeout: 4
    postgresql:
      use_pg_rewind: false
  initdb:
  - encoding: UTF8
  pg_hba:
  - local all all trust
  - host replication replicator 127.0.0.1/32 trust
  - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:%[4]d
  connect_address: 127.0.0.1:%[4]d
  data_dir: %[5]s
  bin_dir: %[6]s
  pgpass: %[7]s/%[1]s.pgpass
  authentication:
    replication:
      username: replicator
      password: replicator
    superuser:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: %[7]s
    shared_buffers: 16MB
`, p.name, p.apiPort, strings.Join(hosts, ","), p.pgPort, p.dataDir, binDir, dir, patroniTTL)
}

// asPostgres runs a command as the postgres user when the test runs as root.
func asPostgres(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		args = append([]string{"--reuid", "postgres", "--regid", "postgres", "--init-groups", name}, args...)
		name = "setpriv"
	}
	cmd := exec.Command(name, args...)
	cmd.Env = envWithout("PATRONI_", "PG")
	return cmd
}

func (p *patroni) start() error {
	logs, err := os.Create(p.logPath)
	if err != nil {
		return err
	}
	p.cmd = asPostgres("patroni", p.config)
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	// Its own process group, which PostgreSQL joins, so cleanup can end both.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		logs.Close()
		return fmt.Errorf("start patroni %s: %w", p.name, err)
	}
	p.exited = make(chan struct{})
	go func() {
		p.cmd.Wait()
		logs.Close()
		close(p.exited)
	}()
	return nil
}

// postmaster is the PID PostgreSQL recorded in its data dir, or 0.
func (p *patroni) postmaster() int {
	b, err := os.ReadFile(filepath.Join(p.dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

func (p *patroni) kill(t *testing.T) {
	pg := p.postmaster()
	p.killedAt = time.Now()
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	if pg > 0 {
		// PostgreSQL may run in a session of its own.
		syscall.Kill(pg, syscall.SIGKILL)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("patroni %s did not die", p.name)
	}
}

// stopPatroni stops every member that still runs: SIGTERM lets Patroni stop
// PostgreSQL cleanly; whatever is left after a grace period is killed.
func stopPatroni(t *testing.T, members []*patroni) {
	for _, p := range members {
		if p.cmd != nil && p.killedAt.IsZero() {
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	for _, p := range members {
		if p.cmd == nil {
			continue
		}
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			t.Errorf("patroni %s ignored SIGTERM for 20 s; killing it", p.name)
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		if pg := p.postmaster(); pg > 0 && syscall.Kill(pg, 0) == nil {
			syscall.Kill(pg, syscall.SIGKILL)
		}
	}
}

// role is what member p's REST API says it is: "primary" (Patroni 3
// also says "master"), "replica", or "" when it does not answer.
func (p *patroni) role(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/patroni", p.apiPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st struct {
		Role  string `json:"role"`
		State string `json:"state"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil || st.State != "running" {
		return ""
	}
	if st.Role == "master" {
		return "primary"
	}
	return st.Role
}

// waitPrimary waits until a member other than not says it is primary.
func waitPrimary(t *testing.T, ctx context.Context, members []*patroni, not *patroni, within time.Duration) *patroni {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, p := range members {
			if p != not && p.role(ctx) == "primary" {
				return p
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no primary within %v", within)
	return nil
}

// waitList waits for `patronictl list` (the operator's view) to show a
// leader and running replicas, want members in all.
func waitList(t *testing.T, ctx context.Context, p *patroni, want int) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(time.Second) {
		cmd := asPostgres("patronictl", "-c", p.config, "list", "-f", "json")
		out, err := cmd.Output()
		last = string(out)
		if err != nil {
			last += err.Error()
			continue
		}
		var rows []struct{ Member, Role, State string }
		if json.Unmarshal(out, &rows) != nil || len(rows) != want {
			continue
		}
		leaders, healthy := 0, 0
		for _, r := range rows {
			if r.Role == "Leader" && r.State == "running" {
				leaders++
			}
			if r.Role == "Replica" && (r.State == "running" || r.State == "streaming") {
				healthy++
			}
		}
		if leaders == 1 && healthy == want-1 {
			t.Logf("patronictl list: %s", strings.TrimSpace(last))
			return
		}
	}
	t.Fatalf("patronictl list never showed 1 leader and %d healthy replicas; last: %s", want-1, last)
}

func psql(t *testing.T, p *patroni, sql string) string {
	t.Helper()
	out, err := psqlQuery(p, sql)
	if err != nil {
		t.Fatalf("psql on %s: %v: %s", p.name, err, out)
	}
	return out
}

func psqlQuery(p *patroni, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "psql", "-h", "127.0.0.1", "-p", strconv.Itoa(p.pgPort), "-U", "postgres",
		"-d", "postgres", "-tAq", "-v", "ON_ERROR_STOP=1", "-c", sql)
	cmd.Env = envWithout("PG")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// waitRow waits for replica p to have replayed row id.
func waitRow(t *testing.T, ctx context.Context, p *patroni, id int) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(200 * time.Millisecond) {
		out, err := psqlQuery(p, fmt.Sprintf("SELECT count(*) FROM corenode_e2e WHERE id = %d", id))
		if err == nil && out == "1" {
			return
		}
		last = out
	}
	t.Fatalf("row %d never reached %s; last answer %q", id, p.name, last)
}

// roleWatch samples every member's role until stopped.
type roleWatch struct {
	done    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	samples int
	both    string
}

func newRoleWatch(members []*patroni) *roleWatch {
	w := &roleWatch{done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			var primaries []string
			for _, p := range members {
				if p.role(context.Background()) == "primary" {
					primaries = append(primaries, p.name)
				}
			}
			w.samples++
			if len(primaries) > 1 && w.both == "" {
				w.both = fmt.Sprintf("%v at %s", primaries, time.Now().Format(time.RFC3339Nano))
			}
		}
	}()
	return w
}

// stop ends sampling and says when two primaries were seen, if ever.
func (w *roleWatch) stop() string {
	w.once.Do(func() {
		close(w.done)
		w.wg.Wait()
	})
	return w.both
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/internal/testenv"
)

// The processes, their ports and the etcdctl plumbing of the end-to-end test.

const (
	// Explicit, so a change of the binary's defaults does not silently
	// change how fast the failover assertion expects a new leader.
	heartbeatMS = 100
	electionMS  = 1000

	ctlCommandTimeout = "5s"
	ctlProcessTimeout = 20 * time.Second
)

// binaryEnv names a prebuilt server binary to use instead of building
// ./cmd/corenode; pointing it at etcd checks the test against the reference.
const binaryEnv = "CORENODE_E2E_BINARY"

// diskLatencyEnv, set to microseconds, runs every member under strace,
// which makes each of its fsync and fdatasync calls take that much longer:
// a slow disk of its own per member, as scripts/bench-vs-etcd
// --disk-latency gives. It widens the windows the kill tests aim at (the
// leader's entries on a follower's disk before its own).
const diskLatencyEnv = "CORENODE_E2E_DISK_LATENCY"

type member struct {
	name      string
	clientURL string
	peerURL   string
	// metricsURL is set by a test that gives the member one (--listen-metrics-urls).
	metricsURL string
	dataDir    string
	logPath    string
	// extra flags override the cluster's (the last of a repeated flag wins).
	extra []string
	// env are environment variables of its process beyond the test's own.
	env []string

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returns
	logs   *os.File
}

type cluster struct {
	t     *testing.T
	bin   string
	token string
	// common flags go to every member, before its extra ones.
	common  []string
	members []*member
	// launch, when set, replaces flags: it gives a member's command line
	// and the variables added to its environment (the test's own CORENODE_*
	// and ETCD_* ones are never passed on).
	launch func(m *member) (args, env []string)
	// ctlFlags go before the arguments of the etcdctl runs the cluster's
	// own waits make (the TLS files of a cluster that wants them).
	ctlFlags []string
}

func requireEtcdctl(t *testing.T) {
	t.Helper()
	testenv.RequireCommand(t, "etcdctl", "install Debian's etcd-client, or run scripts/test, which does")
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

func buildBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(binaryEnv); bin != "" {
		t.Logf("using %s=%s instead of building ./cmd/corenode", binaryEnv, bin)
		return bin
	}
	bin := filepath.Join(t.TempDir(), "corenode")
	// -buildvcs=auto over a GOFLAGS that turns it off: `corenode version`
	// names the revision it was built from.
	args := []string{"build", "-buildvcs=auto", "-o", bin}
	if os.Getenv("CORENODE_E2E_RACE") == "1" {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/corenode")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot(t)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("built corenode in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// freePorts chooses ports outside the ephemeral range, so that a killed
// member's ports are still free when it restarts. Another process can
// still take one before the first start, hence the retry in startCluster.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := freeport.Ports("127.0.0.1", n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

func startCluster(t *testing.T, bin string, common ...string) *cluster {
	t.Helper()
	return startClusterWith(t, bin, func(c *cluster) { c.common = common })
}

// startClusterWith is startCluster with setup applied to each attempt's
// cluster, on its fresh ports, before its members start.
func startClusterWith(t *testing.T, bin string, setup func(c *cluster)) *cluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c := newCluster(t, bin, attempt)
		setup(c)
		err := c.startAll()
		if err == nil {
			err = c.waitHealthy(c.members, 30*time.Second)
		}
		if err == nil {
			return c
		}
		clash := c.logsContain("address already in use")
		c.killAll()
		if clash && attempt == 1 {
			t.Logf("port clash, starting the cluster again on other ports: %v", err)
			continue
		}
		t.Fatalf("cluster did not start: %v", err)
	}
}

func newCluster(t *testing.T, bin string, attempt int) *cluster {
	dir := t.TempDir()
	ports := freePorts(t, 6)
	c := &cluster{t: t, bin: bin, token: fmt.Sprintf("e2e-%d", attempt)}
	for i := range 3 {
		name := fmt.Sprintf("m%d", i+1)
		c.members = append(c.members, &member{
			name:      name,
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			dataDir:   filepath.Join(dir, name+".data"),
			logPath:   filepath.Join(dir, name+".log"),
		})
	}
	t.Cleanup(func() {
		c.killAll()
		// A crash or race report in a member would otherwise show up only
		// indirectly, as a timeout somewhere later.
		for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
			if c.logsContain(bad) {
				t.Errorf("a member's log contains %q", bad)
			}
		}
		if t.Failed() {
			c.dumpLogs()
		}
		for _, m := range c.members {
			if m.logs != nil {
				m.logs.Close()
			}
		}
	})
	return c
}

func (c *cluster) initialCluster() string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, m.name+"="+m.peerURL)
	}
	return strings.Join(parts, ",")
}

// flags are the same on every start: a member with data ignores
// --initial-cluster-state new, as etcd does, so a restart needs no change.
func (c *cluster) flags(m *member) []string {
	return append([]string{
		"--name", m.name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", m.clientURL,
		"--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL,
		"--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", c.initialCluster(),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", c.token,
		"--heartbeat-interval", fmt.Sprint(heartbeatMS),
		"--election-timeout", fmt.Sprint(electionMS),
	}, slices.Concat(c.common, m.extra)...)
}

func (c *cluster) startAll() error {
	for _, m := range c.members {
		if err := c.start(m); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) start(m *member) error {
	if m.logs == nil {
		f, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		m.logs = f
	}
	args, env := c.flags(m), []string(nil)
	if c.launch != nil {
		args, env = c.launch(m)
	}
	fmt.Fprintf(m.logs, "=== %s start: %s %s\n", time.Now().Format(time.RFC3339Nano), c.bin, strings.Join(args, " "))
	cmd := exec.Command(c.bin, args...)
	if us := os.Getenv(diskLatencyEnv); us != "" {
		cmd = exec.Command("strace", append([]string{"-f", "--seccomp-bpf", "-qq", "-o", "/dev/null",
			"-e", "trace=fsync,fdatasync", "-e", "inject=fsync,fdatasync:delay_exit=" + us, "--", c.bin}, args...)...)
	}
	cmd.Env = slices.Concat(envWithout("CORENODE_", "ETCD_"), m.env, env)
	cmd.Stdout = m.logs
	cmd.Stderr = m.logs
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", m.name, err)
	}
	m.cmd = cmd
	m.exited = make(chan struct{})
	go func(exited chan struct{}) {
		cmd.Wait()
		close(exited)
	}(m.exited)
	return nil
}

func (m *member) running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// kill is SIGKILL: the crash the durability promises are about, with no
// chance to flush or hand leadership over.
func (c *cluster) kill(m *member) {
	if !m.running() {
		return
	}
	if os.Getenv(diskLatencyEnv) != "" {
		// The member is strace's child: strace, killed, would let it run on.
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", m.cmd.Process.Pid, m.cmd.Process.Pid)); err == nil {
			var child int
			if _, err := fmt.Sscan(string(b), &child); err == nil {
				syscall.Kill(child, syscall.SIGKILL)
			}
		}
	}
	m.cmd.Process.Kill()
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		c.t.Errorf("%s (pid %d) did not exit 10s after SIGKILL", m.name, m.cmd.Process.Pid)
	}
	fmt.Fprintf(m.logs, "=== %s killed with SIGKILL\n", time.Now().Format(time.RFC3339Nano))
}

func (c *cluster) killAll() {
	for _, m := range c.members {
		c.kill(m)
	}
}

func (c *cluster) logsContain(s string) bool {
	for _, m := range c.members {
		if b, err := os.ReadFile(m.logPath); err == nil && bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

func (c *cluster) dumpLogs() {
	for _, m := range c.members {
		b, err := os.ReadFile(m.logPath)
		if err != nil {
			c.t.Logf("%s: no log: %v", m.name, err)
			continue
		}
		c.t.Logf("----- %s log (%s) -----\n%s", m.name, m.logPath, b)
	}
}

func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

func (c *cluster) byClientURL(u string) *member {
	for _, m := range c.members {
		if m.clientURL == u {
			return m
		}
	}
	return nil
}

// waitHealthy asks etcdctl rather than /health so the same wait works when
// binaryEnv points at etcd; `corenode health` is asserted on its own.
func (c *cluster) waitHealthy(ms []*member, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, m := range ms {
		for {
			if !m.running() {
				return fmt.Errorf("%s exited before it was healthy", m.name)
			}
			res := ctl([]string{m.clientURL}, "", append(slices.Clone(c.ctlFlags), "--command-timeout=2s", "endpoint", "health")...)
			if res.err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not healthy after %v: %v: %s", m.name, timeout, res.err, res.stderr)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

type ctlResult struct {
	stdout, stderr string
	err            error
}

func (r ctlResult) String() string {
	return fmt.Sprintf("err=%v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
}

// ctl runs etcdctl against exactly the given endpoints; ETCDCTL_* variables
// from the caller's environment are dropped because etcdctl 3.4 refuses a
// flag that an environment variable also sets.
func ctl(endpoints []string, stdin string, args ...string) ctlResult {
	ctx, cancel := context.WithTimeout(context.Background(), ctlProcessTimeout)
	defer cancel()
	full := append([]string{
		"--endpoints=" + strings.Join(endpoints, ","),
		"--dial-timeout=2s",
		"--command-timeout=" + ctlCommandTimeout,
	}, args...)
	cmd := exec.CommandContext(ctx, "etcdctl", full...)
	cmd.Env = append(envWithout("ETCDCTL_"), "ETCDCTL_API=3")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("etcdctl still running after %v", ctlProcessTimeout))
	}
	return ctlResult{stdout: out.String(), stderr: errb.String(), err: err}
}

// mustCtl runs etcdctl and fails the test unless it exits 0; it returns
// stdout without the trailing newline.
func mustCtl(t *testing.T, endpoints []string, args ...string) string {
	t.Helper()
	return mustCtlStdin(t, endpoints, "", args...)
}

func mustCtlStdin(t *testing.T, endpoints []string, stdin string, args ...string) string {
	t.Helper()
	r := ctl(endpoints, stdin, args...)
	if r.err != nil {
		t.Fatalf("etcdctl %s: %v", strings.Join(args, " "), r)
	}
	return strings.TrimRight(r.stdout, "\n")
}

func envWithout(prefixes ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"go.etcd.io/etcd/api/v3/authpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/client/election"
	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// actorEnv makes this test binary the CMD of `corenode lock`: it prints its
// pid and token, then "act <CLOCK_MONOTONIC ns>" every 2 ms until killed.
const actorEnv = "CORENODE_HOLD_TEST_ACTOR"

func TestMain(m *testing.M) {
	if os.Getenv(actorEnv) != "" {
		actor()
		return
	}
	if f := os.Getenv(pidsGoneEnv); f != "" {
		checkPidsGone(f)
		return
	}
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func actor() {
	out := bufio.NewWriter(os.Stdout)
	// The pids as the test sees them: CMD runs in the watchdog's PID
	// namespace, where Getpid is small, but /proc is the host's.
	self, err := procStat("self")
	if err != nil {
		panic(err)
	}
	fmt.Fprintln(out, "pid", self.pid, "token", os.Getenv(tokenEnv), "ppid", self.ppid, "leaked", leakedPipes())
	out.Flush()
	if os.Getenv(actorEnv) == "ignore-term" {
		signal.Ignore(syscall.SIGTERM)
	}
	for {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			panic(err)
		}
		fmt.Fprintln(out, "act", ts.Nano())
		out.Flush()
		time.Sleep(2 * time.Millisecond)
	}
}

// leakedPipes lists which of descriptors 3 and 4, the watchdog's control
// and answer pipes, are open pipes in this process: they must not reach
// CMD. (Descriptors the test itself inherited may be open beyond them.)
func leakedPipes() string {
	var leaked []string
	for _, fd := range []string{"3", "4"} {
		if l, err := os.Readlink("/proc/self/fd/" + fd); err == nil && strings.HasPrefix(l, "pipe:") {
			leaked = append(leaked, fd)
		}
	}
	if len(leaked) == 0 {
		return "none"
	}
	return strings.Join(leaked, ",")
}

// built is the corenode binary, built once for the tests that need it.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// buildCorenode builds this command, so the test drives the binary a user
// runs, not main called in-process.
func buildCorenode(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "corenode-hold-test"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "corenode")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", built.bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// holder is a running `corenode lock|elect` and its CMD's output.
type holder struct {
	cmd    *exec.Cmd
	exited chan struct{}
	lines  chan string // stdout, closed at EOF
	cmdPid int
	dogPid int // the watchdog, CMD's parent
	token  int64
	leaked string // CMD's descriptors that are pipes, beyond 0-2
	acts   []int64
}

func startHold(t *testing.T, bin string, env string, args ...string) *holder {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, exited: make(chan struct{}), lines: make(chan string, 4096)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(func() {
		if h.cmdPid != 0 {
			_ = syscall.Kill(h.cmdPid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		<-h.exited
	})
	return h
}

// next reads lines until one starts with want, recording on the way.
func (h *holder) next(t *testing.T, want string, within time.Duration) []string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("output ended before %q", want)
			}
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			switch f[0] {
			case "pid":
				h.cmdPid, _ = strconv.Atoi(f[1])
				h.token, _ = strconv.ParseInt(f[3], 10, 64)
				h.dogPid, _ = strconv.Atoi(f[5])
				h.leaked = f[7]
			case "act":
				at, _ := strconv.ParseInt(f[1], 10, 64)
				h.acts = append(h.acts, at)
			}
			if f[0] == want {
				return f
			}
		case <-timeout:
			t.Fatalf("no %q within %v", want, within)
		}
	}
}

// drain records the rest of the output, until EOF.
func (h *holder) drain(t *testing.T) {
	t.Helper()
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				return
			}
			if f := strings.Fields(line); len(f) == 2 && f[0] == "act" {
				at, _ := strconv.ParseInt(f[1], 10, 64)
				h.acts = append(h.acts, at)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("output still open 10s after the holder exited")
		}
	}
}

func (h *holder) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-h.exited:
		return h.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("corenode still running after %v", within)
		return -1
	}
}

// TestLockPauses stops parts of a holder with SIGSTOP: the supervisor
// (`corenode lock`), its watchdog, CMD, or several. The successor starts
// meanwhile. In every case the paused holder's CMD never acts after the
// successor's first action, and is dead once its holder has been
// continued, which exits 3. Where a part that can stop CMD still runs, CMD
// is dead before anything is continued: the watchdog kills it at the
// deadline when only the supervisor (and CMD) are stopped, and the
// supervisor kills it when only the watchdog or CMD is. Those two cases
// keep renewing, so the test ends the leadership by revoking the lease.
//
// In the whole-holder case (a VM stall) the watchdog is continued first
// and kills CMD before CMD runs again; on a real machine CMD may run for
// an instant first, which is what CORENODE_FENCING_TOKEN is for.
func TestLockPauses(t *testing.T) {
	bin := buildCorenode(t)
	c := membertest.New(t, 1)
	eps := strings.Join(c.Endpoints(), ",")
	for i, tc := range []struct {
		name   string
		stop   holderParts
		revoke bool // the supervisor still renews: end the leadership from outside
	}{
		{"supervisor", holderParts{supervisor: true}, false},
		{"CMD", holderParts{cmd: true}, true},
		{"supervisor and CMD", holderParts{supervisor: true, cmd: true}, false},
		{"watchdog", holderParts{watchdog: true}, true},
		{"whole holder", holderParts{supervisor: true, watchdog: true, cmd: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lock := fmt.Sprintf("/cli-pause-%d", i)
			testPause(t, bin, c.Client(), lock, tc.stop, tc.revoke, "--endpoints", eps)
		})
	}
}

// holderParts are the processes of a `corenode lock` holder.
type holderParts struct{ supervisor, watchdog, cmd bool }

// testPause runs a holder and its successor on lock with conn's flags,
// stops the parts of the holder in stop with SIGSTOP (and revokes its
// lease if revoke), and checks that the holder's CMD never acts after the
// successor's first action.
func testPause(t *testing.T, bin string, cli *clientv3.Client, lock string, stop holderParts, revoke bool, conn ...string) {
	args := append(append([]string{"lock"}, conn...), "--ttl", "1", lock, "--", os.Args[0])
	a := startHold(t, bin, actorEnv+"=1", args...)
	a.next(t, "pid", 15*time.Second)
	if a.leaked != "none" {
		t.Errorf("CMD inherited pipes on descriptors %s: the watchdog's own", a.leaked)
	}
	for range 20 {
		a.next(t, "act", 5*time.Second)
	}
	b := startHold(t, bin, actorEnv+"=1", args...)
	var stopped []int
	for _, p := range []struct {
		on  bool
		pid int
	}{{stop.supervisor, a.cmd.Process.Pid}, {stop.watchdog, a.dogPid}, {stop.cmd, a.cmdPid}} {
		if p.on {
			if err := syscall.Kill(p.pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stopped = append(stopped, p.pid)
		}
	}
	t.Cleanup(func() {
		for _, pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	if revoke {
		revokeHolder(t, cli, lock+"/")
	}
	b.next(t, "pid", 15*time.Second)
	b.next(t, "act", 5*time.Second)
	if b.token <= a.token {
		t.Errorf("successor's token %d is not above the paused holder's %d", b.token, a.token)
	}
	if !stop.supervisor || !stop.watchdog {
		// A part that can stop CMD was running: CMD is dead (or a zombie
		// its stopped parent has yet to reap) already.
		waitGone(t, a.cmdPid, 5*time.Second)
	}
	// Continue as a machine would wake, the watchdog before CMD.
	for _, pid := range []int{a.dogPid, a.cmd.Process.Pid} {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	if code := a.wait(t, 10*time.Second); code != exitHoldLost {
		t.Errorf("paused corenode lock exited %d, want %d (leadership lost)", code, exitHoldLost)
	}
	_ = syscall.Kill(a.cmdPid, syscall.SIGCONT)
	waitGone(t, a.cmdPid, 5*time.Second)
	a.drain(t)
	lastA, firstB := a.acts[len(a.acts)-1], b.acts[0]
	if lastA >= firstB {
		t.Fatalf("the paused holder's CMD acted %v after its successor's first action", time.Duration(lastA-firstB))
	}
	t.Logf("paused holder's CMD: %d actions, the last %v before the successor's first", len(a.acts), time.Duration(firstB-lastA))

	// SIGTERM to corenode reaches CMD; corenode exits with CMD's status and
	// releases the lock at once.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Errorf("corenode lock after SIGTERM exited %d, want %d (CMD killed by SIGTERM)", code, 128+int(syscall.SIGTERM))
	}
	expectNoKeys(t, cli, lock+"/")
}

// revokeHolder revokes the lease of the oldest key under prefix: the
// holder's leadership ends as if the cluster had expired it.
func revokeHolder(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("holder's key under %s: %v (err %v)", prefix, resp, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
}

// waitGone waits until pid has exited (a zombie counts: it runs no more).
// Linux says nothing when a process ends to anyone but its parent, so this
// looks every few milliseconds.
func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// The state follows the command name's closing parenthesis.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the paused holder's CMD (pid %d) still exists after %v: %s", pid, within, stat)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func expectNoKeys(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("keys under %s after the holder exited: %v (err %v), want none: the next holder would wait out the TTL", prefix, resp, err)
	}
}

// TestElectRunsCommand: CMD runs with the fencing token while the election
// key holds VALUE, and its exit status becomes corenode's.
func TestElectRunsCommand(t *testing.T) {
	bin := buildCorenode(t)
	c := membertest.New(t, 1)
	cmd := exec.Command(bin, "elect", "--ttl", "2", "/cli-elect", "node-a:8080", "--",
		"sh", "-c", `echo token "$`+tokenEnv+`"; read line; exit 7`)
	cmd.Env = append(os.Environ(), "ETCDCTL_ENDPOINTS="+strings.Join(c.Endpoints(), ","))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("CMD printed nothing: %v", err)
	}
	token, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "token "), 10, 64)
	if err != nil || token <= 0 {
		t.Fatalf("CMD saw %s=%q, want a revision", tokenEnv, line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := <-election.Observe(ctx, c.Client(), "/cli-elect")
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "node-a:8080" || got.Kvs[0].CreateRevision != token {
		t.Fatalf("election leader %v, want value node-a:8080 created at the token %d", got.Kvs, token)
	}
	_ = stdin.Close()
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 7 {
		t.Fatalf("corenode elect exited %v, want CMD's status 7", err)
	}
	expectNoKeys(t, c.Client(), "/cli-elect/")
	_, _ = io.Copy(io.Discard, stdout)
}

func TestStopGracefully(t *testing.T) {
	deadline := time.Unix(100, 0)
	grace := 150 * time.Millisecond
	for _, tc := range []struct {
		name  string
		cause error
		now   time.Time
		want  bool
	}{
		{"expired, noticed on time", election.ErrExpired, deadline, true},
		{"expired, noticed within the grace", election.ErrExpired, deadline.Add(grace - 1), true},
		{"expired, noticed after the grace (paused)", election.ErrExpired, deadline.Add(grace), false},
		{"lease gone", election.ErrLeaseGone, deadline.Add(-time.Second), false},
		{"key deleted", election.ErrKeyDeleted, deadline.Add(-time.Second), false},
	} {
		if got := stopGracefully(tc.cause, deadline, grace, tc.now); got != tc.want {
			t.Errorf("%s: graceful = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLockKillsCommandBeforeExpiry: cut off from the cluster, `corenode
// lock` stops CMD before the lease could expire, with SIGKILL when CMD
// ignores SIGTERM. The last keep-alive the cluster acknowledged was sent
// before the cluster stopped, so the issuer's deadline is at least the
// stop plus the TTL; CMD's last action must come before that.
func TestLockKillsCommandBeforeExpiry(t *testing.T) {
	bin := buildCorenode(t)
	c := membertest.New(t, 1)
	h := startHold(t, bin, actorEnv+"=ignore-term",
		"lock", "--endpoints", strings.Join(c.Endpoints(), ","), "--ttl", "1", "/cli-cut", "--", os.Args[0])
	h.next(t, "pid", 15*time.Second)
	for range 20 {
		h.next(t, "act", 5*time.Second)
	}
	c.Stop(0)
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	stopped := ts.Nano()
	if code := h.wait(t, 10*time.Second); code != exitHoldLost {
		t.Errorf("corenode lock cut off from the cluster exited %d, want %d", code, exitHoldLost)
	}
	if err := syscall.Kill(h.cmdPid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("CMD ignoring SIGTERM (pid %d) outlived corenode lock: kill 0 = %v", h.cmdPid, err)
	}
	h.drain(t)
	expiry := stopped + int64(time.Second)
	last := h.acts[len(h.acts)-1]
	if last >= expiry {
		t.Fatalf("CMD acted %v after the earliest expiry the cluster could reach", time.Duration(last-expiry))
	}
	t.Logf("CMD's last action came %v before the earliest expiry, %v after Stop returned",
		time.Duration(expiry-last), time.Duration(last-stopped))
}

// TestLockConnectsAsEtcdctl: `corenode lock` reaches a cluster with TLS
// and auth on with etcdctl's flags, or the same from ETCDCTL_*, and says in
// one line why it cannot: an untrusted certificate, a wrong password, no
// member listening, a usage error; -h prints the usage and exits 0.
func TestLockConnectsAsEtcdctl(t *testing.T) {
	bin := buildCorenode(t)
	ca := membertest.NewCA(t, "cluster")
	server := ca.Issue("member", net.ParseIP("127.0.0.1"))
	info := member.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.File}
	c := membertest.New(t, 3, membertest.WithTLS(info, info, ca.ClientConfig(membertest.Pair{})),
		membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.BcryptCost = 4 }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := c.Client()
	for _, step := range []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "locker"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "locker", "/tls-lock/", "/tls-lock0", clientv3.PermissionType(authpb.READWRITE))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "alice", "locker"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	eps := strings.Join(c.Endpoints(), ",")
	run := func(env []string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = cmd.Run()
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("corenode %v still running after 30s; stderr: %s", args, stderr.String())
		}
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	script := `echo "token=$` + tokenEnv + `"`

	code, out, errOut := run(nil, "lock", "--endpoints", eps, "--cacert", ca.File, "--user", "alice:alicepw", "--ttl", "2", "/tls-lock", "--", "sh", "-c", script)
	if code != 0 || !strings.HasPrefix(out, "token=") || out == "token=\n" {
		t.Fatalf("lock with --cacert and --user: exit %d, stdout %q, stderr %q; want 0 and CMD's token", code, out, errOut)
	}
	code, out, errOut = run([]string{"ETCDCTL_ENDPOINTS=" + eps, "ETCDCTL_CACERT=" + ca.File, "ETCDCTL_USER=alice", "ETCDCTL_PASSWORD=alicepw"},
		"elect", "--ttl", "2", "/tls-lock", "v", "--", "sh", "-c", script)
	if code != 0 || !strings.HasPrefix(out, "token=") {
		t.Fatalf("elect with ETCDCTL_*: exit %d, stdout %q, stderr %q; want 0 and CMD's token", code, out, errOut)
	}
	rootCli := loginClient(t, c, ca, "root", "rootpw")
	expectNoKeys(t, rootCli, "/tls-lock/")

	// The issue's case: the supervisor alone stopped, on TLS with auth.
	testPause(t, bin, rootCli, "/tls-lock", holderParts{supervisor: true}, false,
		"--endpoints", eps, "--cacert", ca.File, "--user", "alice:alicepw")

	ports, err := freeport.Ports("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	free := fmt.Sprintf("127.0.0.1:%d", ports[0])
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"untrusted certificate", []string{"--endpoints", c.ClientURL(0) + "," + c.ClientURL(1), "--user", "alice:alicepw", "--dial-timeout", "1s"}, exitHoldError, "certificate"},
		{"wrong password", []string{"--endpoints", eps, "--cacert", ca.File, "--user", "alice:nope"}, exitHoldError, "authentication failed"},
		{"no permission", []string{"--endpoints", eps, "--cacert", ca.File, "--user", "alice:alicepw", "/other"}, exitHoldError, "permission denied"},
		{"nobody listening", []string{"--endpoints", free, "--dial-timeout", "500ms"}, exitHoldError, "no member answered at " + free + " within 500ms"},
		{"no password", []string{"--endpoints", eps, "--user", "alice"}, exitHoldUsage, "has no password"},
	} {
		args := append([]string{"lock"}, tc.args...)
		if !slices.Contains(args, "/other") {
			args = append(args, "/tls-lock")
		}
		code, _, errOut := run(nil, append(args, "--", "true")...)
		t.Logf("%s: exit %d: %s", tc.name, code, strings.TrimSpace(errOut))
		if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line with %q", tc.name, code, errOut, tc.code, tc.want)
		}
	}
	code, out, _ = run(nil, "lock", "-h")
	if code != 0 || !strings.Contains(out, "Usage: corenode lock") || !strings.Contains(out, "-cacert") {
		t.Errorf("lock -h: exit %d, stdout %q; want 0 and the usage with the flags", code, out)
	}
}

// loginClient is a client of c that trusts ca and logs in as user.
func loginClient(t *testing.T, c *membertest.Cluster, ca *membertest.CA, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: ca.ClientConfig(membertest.Pair{}),
		Username: user, Password: password, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

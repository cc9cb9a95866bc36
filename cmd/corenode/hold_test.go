package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/client/election"
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
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func actor() {
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "pid", os.Getpid(), "token", os.Getenv(tokenEnv))
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
	token  int64
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

// TestLockStopsPausedHolder: a whole holder (`corenode lock` and its CMD)
// is stopped past the TTL, as a VM stall would stop it. The successor
// starts meanwhile; when the holder's corenode wakes it kills CMD before
// CMD runs again and exits 3, and every action of CMD comes before the
// successor's first.
//
// corenode is continued before CMD: a stall continues both at once, and
// then CMD may act in the instant before corenode kills it, which no
// supervisor can prevent; that instant is what CORENODE_FENCING_TOKEN is
// for. What this test shows is that corenode stops CMD as soon as it runs.
func TestLockStopsPausedHolder(t *testing.T) {
	bin := buildCorenode(t)
	c := membertest.New(t, 1)
	eps := strings.Join(c.Endpoints(), ",")
	args := []string{"lock", "--endpoints", eps, "--ttl", "1", "/cli-lock", "--", os.Args[0]}

	a := startHold(t, bin, actorEnv+"=1", args...)
	a.next(t, "pid", 15*time.Second)
	for range 20 {
		a.next(t, "act", 5*time.Second)
	}
	b := startHold(t, bin, actorEnv+"=1", args...)

	for _, pid := range []int{a.cmdPid, a.cmd.Process.Pid} {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	b.next(t, "pid", 15*time.Second)
	b.next(t, "act", 5*time.Second)
	if b.token <= a.token {
		t.Errorf("successor's token %d is not above the paused holder's %d", b.token, a.token)
	}
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t, 10*time.Second); code != exitHoldLost {
		t.Errorf("paused corenode lock exited %d, want %d (leadership lost)", code, exitHoldLost)
	}
	if err := syscall.Kill(a.cmdPid, 0); !errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(a.cmdPid, syscall.SIGCONT)
		t.Fatalf("the paused holder's CMD (pid %d) outlived its corenode lock: kill 0 = %v", a.cmdPid, err)
	}
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
	expectNoKeys(t, c.Client(), "/cli-lock/")
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

func TestStopPlan(t *testing.T) {
	deadline := time.Unix(100, 0)
	grace := 150 * time.Millisecond
	for _, tc := range []struct {
		name  string
		cause error
		now   time.Time
		want  stopPlan
	}{
		{"expired, noticed on time", election.ErrExpired, deadline, stopPlan{term: true, killAt: deadline.Add(grace)}},
		{"expired, noticed within the grace", election.ErrExpired, deadline.Add(grace - 1), stopPlan{term: true, killAt: deadline.Add(grace)}},
		{"expired, noticed after the grace (paused)", election.ErrExpired, deadline.Add(grace), stopPlan{killAt: deadline.Add(grace)}},
		{"lease gone", election.ErrLeaseGone, deadline.Add(-time.Second), stopPlan{killAt: deadline.Add(-time.Second)}},
		{"key deleted", election.ErrKeyDeleted, deadline.Add(-time.Second), stopPlan{killAt: deadline.Add(-time.Second)}},
	} {
		if got := stopPlanFor(tc.cause, deadline, grace, tc.now); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
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

package election

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/member/membertest"
)

// The pause test runs holders as child processes (this test binary,
// re-executed), so it can SIGSTOP one as a GC pause or a VM stall would stop
// it. Holders log their actions with CLOCK_MONOTONIC, which one machine's
// processes share, so the parent can order one holder's actions against
// another's.
const (
	helperEnv    = "CORENODE_ELECTION_TEST_HOLDER" // the endpoints; set in the child
	helperPrefix = "/pause-test"
)

func TestMain(m *testing.M) {
	if eps := os.Getenv(helperEnv); eps != "" {
		os.Exit(holderMain(eps))
	}
	os.Exit(m.Run())
}

func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// holderMain campaigns, then acts every 2 ms while Leading says so, and
// prints "act <monotonic ns> <token>" for each action, "stopped <cause>"
// when Leading turns false; it resigns and exits when stdin closes.
//
// An action's time is read before the Leading call that allowed it: the
// library promises validity at the instant of the check, and that instant
// is at or after this reading. What a holder does after its check is what
// the fencing token is for, not this test.
func holderMain(endpoints string) int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	l, err := Campaign(ctx, cli, helperPrefix, strconv.Itoa(os.Getpid()), WithTTL(testTTL))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "leading", l.Token())
	out.Flush()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		at := monotonicNow()
		token, ok := l.Leading()
		if !ok {
			fmt.Fprintln(out, "stopped", context.Cause(l.Context()))
			out.Flush()
			break
		}
		fmt.Fprintln(out, "act", at, token)
		out.Flush()
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	_ = l.Resign(rctx)
	return 0
}

// holderProc is a running holder and what it has printed.
type holderProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // closed at EOF
	acts  []int64
	token int64
}

func startHolder(t *testing.T, endpoints []string) *holderProc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(endpoints, ","))
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
	h := &holderProc{cmd: cmd, stdin: stdin, lines: make(chan string, 1024)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	return h
}

// next reads the holder's lines until one starts with want, recording
// actions on the way; it returns that line's fields.
func (h *holderProc) next(t *testing.T, want string, within time.Duration) []string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("holder exited before printing %q", want)
			}
			f := strings.Fields(line)
			switch f[0] {
			case "error":
				t.Fatalf("holder: %s", line)
			case "act":
				at, _ := strconv.ParseInt(f[1], 10, 64)
				tok, _ := strconv.ParseInt(f[2], 10, 64)
				h.acts = append(h.acts, at)
				h.token = tok
			case "leading":
				h.token, _ = strconv.ParseInt(f[1], 10, 64)
			}
			if f[0] == want {
				return f
			}
		case <-timeout:
			t.Fatalf("holder printed no %q within %v", want, within)
		}
	}
}

// TestPausedHolderStopsBeforeSuccessor: a holder paused (SIGSTOP) for
// longer than its TTL does not act again once it wakes, and every action
// it took comes before its successor's first.
func TestPausedHolderStopsBeforeSuccessor(t *testing.T) {
	c := membertest.New(t, 1)
	a := startHolder(t, c.Endpoints())
	a.next(t, "leading", 15*time.Second)
	for range 20 {
		a.next(t, "act", 5*time.Second)
	}
	b := startHolder(t, c.Endpoints())

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The successor starts while the holder is stopped: its lease expires on
	// the server, which deletes its key.
	b.next(t, "act", 15*time.Second)
	firstB := b.acts[0]
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped := a.next(t, "stopped", 10*time.Second)
	t.Logf("paused holder (token %d) acted %d times, then: %s; successor has token %d",
		a.token, len(a.acts), strings.Join(stopped[1:], " "), b.token)

	if b.token <= a.token {
		t.Errorf("successor's token %d is not above the paused holder's %d", b.token, a.token)
	}
	lastA := a.acts[len(a.acts)-1]
	if lastA >= firstB {
		t.Fatalf("paused holder acted at %d ns, %v after its successor's first action at %d ns",
			lastA, time.Duration(lastA-firstB), firstB)
	}
	t.Logf("paused holder's last action came %v before its successor's first", time.Duration(firstB-lastA))
	_ = a.stdin.Close()
	_ = b.stdin.Close()
	if err := a.cmd.Wait(); err != nil {
		t.Errorf("paused holder exited: %v", err)
	}
}

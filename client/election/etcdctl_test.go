package election

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/testenv"
	"github.com/corenode/corenode/member/membertest"
)

func requireEtcdctl(t *testing.T) {
	t.Helper()
	testenv.RequireCommand(t, "etcdctl", "install Debian's etcd-client, or run scripts/test, which does")
}

// etcdctl starts etcdctl against endpoints, without the caller's ETCDCTL_*
// variables (etcdctl 3.4 refuses a flag an environment variable also sets).
func etcdctl(t *testing.T, endpoints []string, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command("etcdctl", append([]string{"--endpoints=" + strings.Join(endpoints, ",")}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "ETCDCTL_API=3")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, bufio.NewScanner(out)
}

// lineSeen sends true once sc yields the line want; false at EOF.
func lineSeen(sc *bufio.Scanner, want string) <-chan bool {
	ch := make(chan bool, 1)
	go func() {
		for sc.Scan() {
			if sc.Text() == want {
				ch <- true
				return
			}
		}
		ch <- false
	}()
	return ch
}

// TestEtcdctlObservesAndExcludes: `etcdctl elect -l` sees this package's
// leaders change, and `etcdctl lock` waits while a Lock is held.
func TestEtcdctlObservesAndExcludes(t *testing.T) {
	requireEtcdctl(t)
	c := membertest.New(t, 1)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, listen := etcdctl(t, c.Endpoints(), "elect", "-l", "/ctl-elect")
	first, err := Campaign(ctx, cli, "/ctl-elect", "first", WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !within(t, lineSeen(listen, "first"), 10*time.Second, "etcdctl elect -l printing the first leader") {
		t.Fatal("etcdctl elect -l ended before printing the first leader")
	}
	second := campaignAsync(ctx, cli, "/ctl-elect", "second", WithTTL(5*time.Second))
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if l := within(t, second, 10*time.Second, "second Campaign"); l == nil {
		t.Fatal("second Campaign failed")
	}
	if !within(t, lineSeen(listen, "second"), 10*time.Second, "etcdctl elect -l printing the second leader") {
		t.Fatal("etcdctl elect -l ended before printing the second leader")
	}

	held, err := Lock(ctx, cli, "/ctl-lock", WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, locked := etcdctl(t, c.Endpoints(), "lock", "/ctl-lock", "echo", "etcdctl-has-it")
	got := lineSeen(locked, "etcdctl-has-it")
	select {
	case <-got:
		t.Fatal("etcdctl lock ran its command while Lock holds the lock")
	case <-time.After(500 * time.Millisecond):
	}
	if err := held.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if !within(t, got, 10*time.Second, "etcdctl lock after Resign") {
		t.Fatal("etcdctl lock ended without running its command")
	}
}

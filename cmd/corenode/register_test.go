package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/client/discovery"
	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/member/membertest"
)

// keyEvents follows key from its current state: present receives true
// when it is put (or is there at the start), false when it is deleted.
func keyEvents(t *testing.T, cli *clientv3.Client, key string) <-chan bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan bool, 16)
	if len(resp.Kvs) > 0 {
		ch <- true
	}
	go func() {
		for wr := range cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
			for _, ev := range wr.Events {
				ch <- ev.Type == mvccpb.PUT
			}
		}
	}()
	return ch
}

func expectKey(t *testing.T, events <-chan bool, want bool, within time.Duration, what string) time.Time {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case got := <-events:
			if got == want {
				return time.Now()
			}
		case <-timeout:
			t.Fatalf("%s: the endpoint's key was not %s within %v", what, map[bool]string{true: "put", false: "deleted"}[want], within)
		}
	}
}

// TestRegisterFollowsCheck: `corenode register` stores the endpoint in
// client/discovery's format once its HTTP check passes, removes it within
// one check interval of the check failing, stores it again when it passes,
// and, killed with SIGKILL, leaves it to expire within its TTL.
func TestRegisterFollowsCheck(t *testing.T) {
	bin := buildCorenode(t)
	c := membertest.New(t, 1)
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	events := keyEvents(t, c.Client(), discovery.Key("web", addr))
	const interval = 300 * time.Millisecond
	ports, err := freeport.Ports("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	h := startHold(t, bin, "X=1", "register", "--endpoints", strings.Join(c.Endpoints(), ","), "--ttl", "2",
		"--check-http", srv.URL+"/health", "--check-interval", interval.String(), "--metadata", `{"zone":"a"}`,
		"--metrics-addr", metricsAddr, "web", addr)
	expectKey(t, events, true, 15*time.Second, "check passing")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Client().Get(ctx, discovery.Key("web", addr))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get the endpoint: %v %v", resp, err)
	}
	ep, err := discovery.Decode(resp.Kvs[0].Value)
	if err != nil || ep.Addr != addr || resp.Kvs[0].Lease == 0 {
		t.Fatalf("endpoint record %s (lease %x): %v; want Addr %s under a lease", resp.Kvs[0].Value, resp.Kvs[0].Lease, err, addr)
	}
	if md, _ := ep.Metadata.(map[string]any); md["zone"] != "a" {
		t.Errorf("endpoint metadata %v, want the --metadata given", ep.Metadata)
	}

	failed := time.Now()
	healthy.Store(false)
	gone := expectKey(t, events, false, 5*time.Second, "check failing")
	// The next check starts within an interval and fails at once (503).
	if d := gone.Sub(failed); d > interval+200*time.Millisecond {
		t.Errorf("endpoint removed %v after its check began failing, want within one interval (%v)", d, interval)
	}
	healthy.Store(true)
	expectKey(t, events, true, 5*time.Second, "check passing again")

	// The gauge is set just after the put the watch saw: read until it is.
	a := `addr="` + addr + `",`
	wants := []string{
		`corenode_register_checks_total{` + a + `result="fail",service="web"} `, // 1 or 2: a check may fail again before the flip back
		`corenode_register_registrations_total{` + a + `service="web"} 2`,
		`corenode_register_deregistrations_total{` + a + `reason="check",service="web"} 1`,
		`corenode_register_registered{` + a + `service="web"} 1`,
	}
	var body []byte
	for try := 0; ; try++ {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		missing := slices.DeleteFunc(slices.Clone(wants), func(w string) bool { return strings.Contains(string(body), w) })
		if len(missing) == 0 {
			break
		}
		if try == 50 {
			t.Fatalf("metrics lack %q:\n%s", missing, body)
		}
		time.Sleep(20 * time.Millisecond)
	}

	killed := time.Now()
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	gone = expectKey(t, events, false, 10*time.Second, "register killed")
	if d := gone.Sub(killed); d > 2*time.Second+300*time.Millisecond {
		t.Errorf("endpoint of a killed register gone %v after the kill, want within its TTL of 2s", d)
	}
}

// TestRegisterCommand: with -- CMD the endpoint is registered while CMD
// runs (no check: at once) and removed when CMD exits, whose status
// corenode exits with; SIGTERM to corenode deregisters, then reaches CMD.
func TestRegisterCommand(t *testing.T) {
	bin := buildCorenode(t)
	c := membertest.New(t, 1)
	eps := strings.Join(c.Endpoints(), ",")
	events := keyEvents(t, c.Client(), discovery.Key("job", "10.0.0.9:80"))
	cmd := exec.Command(bin, "register", "--endpoints", eps, "job", "10.0.0.9:80", "--", "sh", "-c", "read line; exit 7")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	expectKey(t, events, true, 15*time.Second, "CMD running")
	stdin.Close()
	expectKey(t, events, false, 5*time.Second, "CMD exited")
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 7 {
		t.Fatalf("corenode register exited %v, want CMD's status 7", err)
	}

	h := startHold(t, bin, "X=1", "register", "--endpoints", eps, "job", "10.0.0.9:80", "--", "sleep", "60")
	expectKey(t, events, true, 15*time.Second, "second CMD running")
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expectKey(t, events, false, 5*time.Second, "SIGTERM")
	if code := h.wait(t, 5*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("corenode register after SIGTERM exited %d, want %d (CMD killed by SIGTERM)", code, 128+int(syscall.SIGTERM))
	}
}

// TestHealthChecks: each kind of check passes and fails as documented.
func TestHealthChecks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := ln.Addr().String()
	closedLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := closedLn.Addr().String()
	closedLn.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer ln.Close()
	block := make(chan struct{})
	defer close(block)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
		case "/slow":
			select {
			case <-block:
			case <-r.Context().Done():
			}
		default:
			http.Error(w, "no", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name  string
		check healthCheck
		pass  bool
	}{
		{"http 200", httpCheck(srv.URL + "/ok"), true},
		{"http 500", httpCheck(srv.URL + "/bad"), false},
		{"http past the timeout", httpCheck(srv.URL + "/slow"), false},
		{"tcp open", tcpCheck(open), true},
		{"tcp closed", tcpCheck(closed), false},
		{"exec exit 0", execCheck("true"), true},
		{"exec exit 1", execCheck("exit 1"), false},
		{"exec past the timeout", execCheck("sleep 30"), false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := tc.check(ctx)
		cancel()
		if (err == nil) != tc.pass {
			t.Errorf("%s: err %v, want pass %v", tc.name, err, tc.pass)
		}
	}
}

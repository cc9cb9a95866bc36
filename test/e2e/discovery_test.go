package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/testenv"
)

// TestRegisterAndDig is the any-language path of docs/discovery.md, as a
// user walks it: a Python http.server registered with `corenode register
// --check-http`; `dig SRV` on every member shows it; its health endpoint
// failing removes it within one check interval, its recovery adds it
// back; `kill -9` of the register process removes it within its TTL.
func TestRegisterAndDig(t *testing.T) {
	testenv.RequireCommand(t, "dig", "install Debian's bind9-dnsutils, or run scripts/test, which does")
	testenv.RequireCommand(t, "python3", "install Debian's python3")
	requireEtcdctl(t)
	bin := buildBinary(t)
	c := startCluster(t, bin)
	// Restarted with a DNS port each: the cluster's helper starts every
	// member with the same flags.
	dnsPorts := freePorts(t, 3)
	c.killAll()
	for i, m := range c.members {
		m.extra = []string{"--dns-addr", fmt.Sprintf("127.0.0.1:%d", dnsPorts[i])}
	}
	if err := c.startAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy(c.members, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	web := t.TempDir()
	health := filepath.Join(web, "health")
	if err := os.WriteFile(health, []byte("ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePorts(t, 1)[0]
	py := exec.Command("python3", "-m", "http.server", fmt.Sprint(port), "--bind", "127.0.0.1", "--directory", web)
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = py.Process.Kill(); _ = py.Wait() }()

	const interval, ttl = time.Second, 3 * time.Second
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	reg := exec.Command(bin, "register", "--endpoints", strings.Join(c.endpoints(), ","), "--ttl", fmt.Sprint(int(ttl/time.Second)),
		"--check-http", "http://"+addr+"/health", "--check-interval", interval.String(), "web", addr)
	reg.Env = envWithout("ETCDCTL_", "CORENODE_")
	reg.Stderr = os.Stderr
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Process.Kill(); _ = reg.Wait() }()

	want := fmt.Sprintf("1 1 %d 7f000001.addr.corenode.", port)
	for i := range c.members {
		waitDig(t, dnsPorts[i], want, 20*time.Second, "python registered")
	}
	if out := dig(t, dnsPorts[1], "+short", "web.service.corenode."); out != "127.0.0.1" {
		t.Errorf("dig A on m2: %q, want 127.0.0.1", out)
	}

	failed := time.Now()
	if err := os.Remove(health); err != nil { // http.server answers 404 from now on
		t.Fatal(err)
	}
	took := waitDig(t, dnsPorts[2], "", 10*time.Second, "health endpoint failing")
	t.Logf("endpoint gone from m3's DNS %v after its health endpoint began failing (check interval %v)", took.Sub(failed), interval)
	if took.Sub(failed) > interval+500*time.Millisecond {
		t.Errorf("endpoint gone %v after its health endpoint began failing, want within the check interval %v", took.Sub(failed), interval)
	}
	if err := os.WriteFile(health, []byte("ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitDig(t, dnsPorts[0], want, 10*time.Second, "health endpoint passing again")

	killed := time.Now()
	if err := reg.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	took = waitDig(t, dnsPorts[1], "", 10*time.Second, "register killed")
	t.Logf("endpoint of the killed register gone %v after the kill (TTL %v)", took.Sub(killed), ttl)
	if took.Sub(killed) > ttl+500*time.Millisecond {
		t.Errorf("endpoint of a killed register gone %v after the kill, want within its TTL %v", took.Sub(killed), ttl)
	}
	if out := dig(t, dnsPorts[0], "SRV", "web.service.corenode."); !strings.Contains(out, "status: NXDOMAIN") {
		t.Errorf("dig of the service with no endpoint left:\n%s", out)
	}
}

func dig(t *testing.T, port int, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "dig", append([]string{"@127.0.0.1", "-p", fmt.Sprint(port), "+time=1", "+tries=1"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// waitDig asks for the SRV records every 20 ms until they are want, and
// returns when they first were: dig is a separate process, so asking is
// the only way to see the change.
func waitDig(t *testing.T, port int, want string, within time.Duration, what string) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := dig(t, port, "+short", "SRV", "web.service.corenode.")
		if got == want {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: dig SRV on 127.0.0.1:%d gives %q after %v, want %q", what, port, got, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/member/membertest"
)

func TestCheckServiceName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"web", true},
		{"web-2", true},
		{"a", true},
		{"0day", true},
		{"api.web", true}, // the DNS server joins labels: api.web.service.corenode.
		{strings.Repeat("a", 63), true},
		{"", false},
		{"bad name!", false},
		{"bad!name", false},
		{"Web", false}, // DNS looks up "web"
		{"-web", false},
		{"web-", false},
		{"we_b", false},
		{"web/admin", false}, // another service's key prefix
		{"api..web", false},
		{".web", false},
		{"web.", false},
		{strings.Repeat("a", 64), false},
		{strings.Repeat("a.", 127) + "ab", false}, // 256 characters
	} {
		if err := checkServiceName(tc.name); (err == nil) != tc.ok {
			t.Errorf("checkServiceName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestCheckHostPort(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:9", true},
		{"web.example.com:443", true},
		{"[::1]:8080", true},
		{"10.0.0.1:65535", true},
		{"noport", false},
		{"10.0.0.1", false},
		{":80", false},
		{"10.0.0.1:0", false},
		{"10.0.0.1:65536", false},
		{"10.0.0.1:http", false},
		{"10.0.0.1:-1", false},
		{"::1:80", false},
		{"", false},
	} {
		if err := checkHostPort("ADDR", tc.addr); (err == nil) != tc.ok {
			t.Errorf("checkHostPort(%q) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
}

func TestCheckHTTPURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080/health", true},
		{"https://web.example.com/", true},
		{"http://[::1]:80/", true},
		{"notaurl", false},
		{"/health", false},
		{"127.0.0.1:8080/health", false},
		{"ftp://host/x", false},
		{"http://", false},
		{"http://:80/", false},
		{"http://host:port/", false},
		{"", false},
	} {
		if err := checkHTTPURL(tc.url); (err == nil) != tc.ok {
			t.Errorf("checkHTTPURL(%q) = %v, want ok %v", tc.url, err, tc.ok)
		}
	}
}

// TestBadInputRefused: each bad value gets one line on stderr that names
// it, and exit status 2, before anything connects (the endpoint given
// has nobody listening).
func TestBadInputRefused(t *testing.T) {
	bin := buildCorenode(t)
	conn := []string{"--endpoints", "127.0.0.1:1", "--dial-timeout", "200ms"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"empty lock name", []string{"lock", "", "--", "true"}, "lock name is empty"},
		{"empty election name", []string{"elect", "", "v", "--", "true"}, "election name is empty"},
		{"check URL not a URL", []string{"register", "--check-http", "notaurl", "svc", "127.0.0.1:9"}, `--check-http "notaurl"`},
		{"check URL not http", []string{"register", "--check-http", "ftp://h/x", "svc", "127.0.0.1:9"}, "http:// or https://"},
		{"check TCP without port", []string{"register", "--check-tcp", "127.0.0.1", "svc", "127.0.0.1:9"}, "--check-tcp"},
		{"service name", []string{"register", "bad name!", "127.0.0.1:9"}, `service name "bad name!"`},
		{"service name capital", []string{"register", "Web", "127.0.0.1:9"}, "capital"},
		{"address without port", []string{"register", "svc", "127.0.0.1"}, `ADDR "127.0.0.1"`},
		{"address port out of range", []string{"register", "svc", "127.0.0.1:70000"}, "1 to 65535"},
		{"address port not numeric", []string{"register", "svc", "127.0.0.1:http"}, "1 to 65535"},
	} {
		args := append([]string{tc.args[0]}, append(conn, tc.args[1:]...)...)
		cmd := exec.Command(bin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s: corenode %q still running after 20s", tc.name, args)
			continue
		}
		errOut := strings.TrimSpace(stderr.String())
		t.Logf("%s: exit %d: %s", tc.name, cmd.ProcessState.ExitCode(), errOut)
		if code := cmd.ProcessState.ExitCode(); code != exitHoldUsage || strings.Contains(errOut, "\n") || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line with %q", tc.name, code, errOut, exitHoldUsage, tc.want)
		}
	}
}

// TestRegisterSaysCheckFails: a check that fails from the start (nobody
// listens on the port) is said in one line, once, not in silence: the
// endpoint is not registered until it passes, and why.
func TestRegisterSaysCheckFails(t *testing.T) {
	bin := buildCorenode(t)
	c := membertest.New(t, 1)
	closed := freeAddr(t)
	for _, check := range [][]string{
		{"--check-tcp", closed},
		{"--check-http", "http://" + closed + "/health"},
	} {
		args := append([]string{"register", "--endpoints", strings.Join(c.Endpoints(), ","), "--check-interval", "100ms"}, check...)
		cmd := exec.Command(bin, append(args, "svc", "127.0.0.1:9")...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 100)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		said, checks := 0, 0
		timeout := time.After(20 * time.Second)
		// Five more intervals after the first word, to see it said once.
		for said == 0 || checks < 5 {
			select {
			case line := <-lines:
				if strings.Contains(line, "not registered until the check passes") && strings.Contains(line, "connection refused") {
					said++
				} else {
					t.Errorf("%v: unexpected log line %q", check, line)
				}
			case <-time.After(100 * time.Millisecond):
				if said > 0 {
					checks++
				}
			case <-timeout:
				t.Fatalf("%v: no line saying the check fails within 20s", check)
			}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if said != 1 {
			t.Errorf("%v: the failing check was said %d times, want once", check, said)
		}
	}
}

// freeAddr is a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ports, err := freeport.Ports("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0])
}

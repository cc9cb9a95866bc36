package member_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHTTPListeners checks etcd's HTTP-side flags on a running member:
// --listen-client-http-urls takes HTTP off the client URL, --cors and
// --host-whitelist answer as etcd's access controller, and
// --warning-unary-request-duration logs slow calls.
func TestHTTPListeners(t *testing.T) {
	ports, err := freeport.Ports("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	httpURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	var logs syncBuffer
	c := membertest.New(t, 1, membertest.WithConfig(func(_ int, cfg *member.Config) {
		cfg.ListenClientHTTPURLs = []string{httpURL}
		cfg.SocketOpts = member.SocketOpts{ReusePort: true, ReuseAddress: true}
		cfg.CORS = []string{"https://ui.example"}
		cfg.HostWhitelist = []string{"etcd.example", "127.0.0.1"}
		cfg.WarningUnaryRequestDuration = time.Nanosecond
		cfg.WarningApplyDuration = time.Nanosecond
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}))
	get := func(url, host, origin string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(body)
	}
	if code, _, body := get(httpURL+"/health", "", ""); code != 200 || !strings.Contains(body, `"health":"true"`) {
		t.Errorf("/health on the HTTP URL: %d %s", code, body)
	}
	if code, _, body := get(c.ClientURL(0)+"/health", "", ""); code != http.StatusNotFound || !strings.Contains(body, "--listen-client-http-urls") {
		t.Errorf("/health on the client URL: %d %s", code, body)
	}
	if code, _, body := get(httpURL+"/health", "evil.example", ""); code != http.StatusMisdirectedRequest {
		t.Errorf("a Host not whitelisted: %d %s", code, body)
	}
	if code, h, _ := get(httpURL+"/version", "etcd.example:2379", "https://ui.example"); code != 200 || h.Get("Access-Control-Allow-Origin") != "https://ui.example" {
		t.Errorf("an allowed origin: %d %v", code, h)
	}
	if _, h, _ := get(httpURL+"/version", "", "https://other.example"); h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("an origin not allowed got %v", h)
	}
	// SO_REUSEPORT: a second socket with it binds the same port.
	lc := net.ListenConfig{Control: reusePort}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(ports[0]))
	if err != nil {
		t.Errorf("a second SO_REUSEPORT listener on the member's port: %v", err)
	} else {
		ln.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Client(0).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `msg="request stats"`) || !strings.Contains(logs.String(), `msg="apply request took too long"`) ||
		!strings.Contains(logs.String(), "KV/Put") {
		t.Errorf("no slow-request line for a Put:\n%s", logs.String())
	}
}

package member_test

import (
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// TestHTTPErrorsInTheMembersLog: a client refused in the TLS handshake is
// logged by the member's logger (one format per member), not by Go's
// standard log, which writes plain text to stderr beside the member's JSON.
func TestHTTPErrorsInTheMembersLog(t *testing.T) {
	var std syncBuffer
	defer log.SetOutput(log.Writer())
	log.SetOutput(&std)
	var own syncBuffer
	ca := membertest.NewCA(t, "cluster")
	server := ca.Issue("member", net.ParseIP("127.0.0.1"))
	client := ca.Issue("client")
	info := member.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.File, ClientCertAuth: true}
	ports, err := freeport.Ports("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	metrics := fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	c := membertest.New(t, 1, membertest.WithTLS(info, info, ca.ClientConfig(client)),
		membertest.WithConfig(func(_ int, cfg *member.Config) {
			cfg.Logger = slog.New(slog.NewJSONHandler(&own, &slog.HandlerOptions{Level: slog.LevelDebug}))
			cfg.ListenMetricsURLs = []string{metrics}
		}))
	c.WaitLeader()

	// The metrics URL's https is net/http's own TLS (the client URLs' is
	// the client mux's), so its refusals are net/http's to log.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(membertest.Pair{})}, Timeout: 5 * time.Second}
	if resp, err := hc.Get(metrics + "/health"); err == nil {
		resp.Body.Close()
		t.Fatal("/health served a client without a certificate")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(own.String(), "TLS handshake error") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(own.String(), "TLS handshake error") {
		t.Errorf("the member's log has no TLS handshake error; %d bytes; std: %q", len(own.String()), std.String())
	}
	if strings.Contains(std.String(), "TLS handshake error") {
		t.Errorf("Go's standard log got the handshake error: %q", std.String())
	}
}

package e2e

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestHealthServingOnceReadyAfterKill is what etcd's robustness harness
// does after its Kill failpoint: SIGKILL one member, start it again, wait
// for etcd's "ready to serve client requests" line, and ask
// grpc.health.v1.Health once; anything but SERVING fails the run. etcd
// answers SERVING from that line on. corenode answered NOT_SERVING there.
func TestHealthServingOnceReadyAfterKill(t *testing.T) {
	c, m, _, ctx := oneMemberWritten(t, 50)
	for round := range 5 {
		c.kill(m)
		logged := logSize(t, m)
		if err := c.start(m); err != nil {
			t.Fatal(err)
		}
		for !logSince(t, m, logged, "ready to serve client requests") {
			if !m.running() {
				t.Fatalf("%s exited after its restart", m.name)
			}
			if ctx.Err() != nil {
				t.Fatal("no ready line after the restart")
			}
			time.Sleep(time.Millisecond)
		}
		addr := strings.TrimPrefix(m.clientURL, "http://")
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		conn.Close()
		if err != nil {
			t.Fatalf("round %d: health check after the ready line: %v", round, err)
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			readyz := ""
			if r, err := http.Get(m.clientURL + "/readyz?verbose"); err == nil {
				b, _ := io.ReadAll(r.Body)
				r.Body.Close()
				readyz = string(b)
			}
			t.Fatalf("round %d: health %s right after the ready line (/readyz: %s)", round, resp.Status, readyz)
		}
	}
}

func logSize(t *testing.T, m *member) int {
	t.Helper()
	b, err := os.ReadFile(m.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

func logSince(t *testing.T, m *member, from int, s string) bool {
	t.Helper()
	b, err := os.ReadFile(m.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b[from:], []byte(s))
}

package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/corenode/corenode/internal/freeport"
)

// collector is an OTLP trace collector that keeps what it is sent.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu       sync.Mutex
	services map[string]bool
	spans    []string
}

func (c *collector) Export(_ context.Context, r *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range r.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" || a.Key == "service.instance.id" {
				c.services[a.Key+"="+a.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, s.Name)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// TestDistributedTracing starts a member with etcd's tracing flags and
// checks a client call's span reaches the collector, named as etcd's are.
func TestDistributedTracing(t *testing.T) {
	col := &collector{services: map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, col)
	go srv.Serve(ln)
	defer srv.Stop()

	dir := t.TempDir()
	ports, err := freeport.Ports("127.0.0.1", 2)
	if err != nil {
		t.Fatal(err)
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	s, err := parseFlags([]string{"--name=t", "--data-dir=" + filepath.Join(dir, "data"), "--listen-client-urls=" + client,
		"--advertise-client-urls=" + client, "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--log-outputs=" + filepath.Join(dir, "log"), "--experimental-enable-distributed-tracing",
		"--distributed-tracing-address=" + ln.Addr().String(), "--distributed-tracing-instance-id=t-1",
		"--distributed-tracing-sampling-rate=1000000"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _, closeAll, err := start(s, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("not ready after 20 s")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "traced"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	m.Close()
	closeAll() // flushes the spans
	col.mu.Lock()
	defer col.mu.Unlock()
	put := false
	for _, n := range col.spans {
		put = put || n == "etcdserverpb.KV/Put"
	}
	if !put || !col.services["service.name=etcd"] || !col.services["service.instance.id=t-1"] {
		t.Errorf("collector got spans %v for %v; want etcdserverpb.KV/Put from service etcd, instance t-1", col.spans, col.services)
	}
}

package discovery_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdresolver "go.etcd.io/etcd/client/v3/naming/resolver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	gresolver "google.golang.org/grpc/resolver"

	"github.com/corenode/corenode/client/discovery"
	"github.com/corenode/corenode/client/discovery/resolver"
	"github.com/corenode/corenode/member/membertest"
)

// recordingConn is the gRPC side of a resolver under test: it hands each
// endpoint set and error to the test on a channel.
type recordingConn struct {
	gresolver.ClientConn // methods a resolver must not call panic
	states               chan []string
	errs                 chan error
}

func newRecordingConn() *recordingConn {
	return &recordingConn{states: make(chan []string, 256), errs: make(chan error, 1)}
}

func (c *recordingConn) UpdateState(s gresolver.State) error {
	var addrs []string
	for _, ep := range s.Endpoints {
		for _, a := range ep.Addresses {
			addrs = append(addrs, a.Addr)
		}
	}
	c.states <- addrs
	return nil
}

// ReportError keeps the first error not yet read: a resolver reports
// again on every failed retry.
func (c *recordingConn) ReportError(err error) {
	select {
	case c.errs <- err:
	default:
	}
}

// waitState reads endpoint sets until one equals want.
func (c *recordingConn) waitState(ctx context.Context, t *testing.T, want ...string) {
	t.Helper()
	var last []string
	for {
		select {
		case got := <-c.states:
			if slices.Equal(got, want) {
				return
			}
			last = got
		case <-ctx.Done():
			t.Fatalf("resolver never gave %q; last %q", want, last)
		}
	}
}

func build(t *testing.T, cli *clientv3.Client, service string) *recordingConn {
	t.Helper()
	cc := newRecordingConn()
	r, err := resolver.NewBuilder(cli).Build(gresolver.Target{URL: url.URL{Scheme: resolver.Scheme, Path: "/" + service}}, cc, gresolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return cc
}

func TestResolverFollowsTheStore(t *testing.T) {
	c := membertest.New(t, 3)
	cli := c.Client()
	ctx := testContext(t)

	if _, err := resolver.NewBuilder(cli).Build(gresolver.Target{URL: url.URL{Scheme: resolver.Scheme}}, newRecordingConn(), gresolver.BuildOptions{}); err == nil {
		t.Fatal("a target without a service built a resolver")
	}

	cc := build(t, cli, "svc")
	cc.waitState(ctx, t)

	a, err := discovery.Register(ctx, cli, "svc", "127.0.0.1:3001", ttl)
	if err != nil {
		t.Fatal(err)
	}
	cc.waitState(ctx, t, "127.0.0.1:3001")

	// A record written by etcd's manager, and one nobody can read: the
	// first is followed, the second skipped.
	theirs := etcdRegister(ctx, t, cli, "svc", "svc/etcd", "127.0.0.1:3002")
	if _, err := cli.Put(ctx, "svc/garbage", "not json"); err != nil {
		t.Fatal(err)
	}
	// A key of another service that only shares the first letters.
	if _, err := cli.Put(ctx, "svcx/127.0.0.1:3009", `{"Op":0,"Addr":"127.0.0.1:3009"}`); err != nil {
		t.Fatal(err)
	}
	cc.waitState(ctx, t, "127.0.0.1:3001", "127.0.0.1:3002")

	if err := a.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	cc.waitState(ctx, t, "127.0.0.1:3002")
	// etcd's registration is kept alive by nobody: it leaves when its
	// lease expires.
	cc.waitState(ctx, t)
	if r, err := cli.TimeToLive(ctx, theirs); err != nil || r.TTL != -1 {
		t.Fatalf("the endpoint left while its lease lives: %+v, %v", r, err)
	}

	// A resolver whose client is closed tells gRPC it follows nothing
	// any more.
	own := c.Client()
	closing := build(t, own, "svc")
	closing.waitState(ctx, t)
	own.Close()
	select {
	case err := <-closing.errs:
		t.Logf("after the client closed: %v", err)
	case <-ctx.Done():
		t.Fatal("no error reported to gRPC after the resolver's client closed")
	}
}

// TestResolverRecoversFromOutageAndCompaction cuts a resolver's client off
// while the service changes and the history of those changes is compacted:
// its watch cannot resume, so it must list again. A resolver built while
// the cluster cannot be reached reports the error to gRPC and resolves once
// it can.
func TestResolverRecoversFromOutageAndCompaction(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := testContext(t)
	writer := c.Client(1, 2)
	cut := c.Client(0)

	a, err := discovery.Register(ctx, writer, "svc", "127.0.0.1:4001", ttl)
	if err != nil {
		t.Fatal(err)
	}
	watching := build(t, cut, "svc")
	watching.waitState(ctx, t, "127.0.0.1:4001")

	c.Stop(0)
	c.WaitLeader()
	late := build(t, cut, "svc")
	select {
	case err := <-late.errs:
		t.Logf("resolver without a cluster reported: %v", err)
	case <-ctx.Done():
		t.Fatal("resolver that cannot list reported no error to gRPC")
	}

	b, err := discovery.Register(ctx, writer, "svc", "127.0.0.1:4002", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Deregister(ctx)
	if err := a.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	put, err := writer.Put(ctx, "unrelated", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Compact(ctx, put.Header.Revision); err != nil {
		t.Fatal(err)
	}

	c.Restart(0)
	watching.waitState(ctx, t, "127.0.0.1:4002")
	late.waitState(ctx, t, "127.0.0.1:4002")
}

// healthServer serves gRPC's health service on a loopback port and
// returns its address.
func healthServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// reached makes n health checks through conn and returns the set of
// servers they reached; it errs if a check fails.
func reached(ctx context.Context, conn *grpc.ClientConn, n int) (map[string]bool, error) {
	hc := healthpb.NewHealthClient(conn)
	seen := map[string]bool{}
	for range n {
		var p peer.Peer
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
		cancel()
		if err != nil {
			return seen, fmt.Errorf("health check: %w", err)
		}
		seen[p.Addr.String()] = true
	}
	return seen, nil
}

func reachesOnly(ctx context.Context, conn *grpc.ClientConn, want ...string) func() error {
	return func() error {
		seen, err := reached(ctx, conn, 20)
		if err != nil {
			return err
		}
		if len(seen) != len(want) {
			return fmt.Errorf("calls reached %v, want %q", seen, want)
		}
		for _, w := range want {
			if !seen[w] {
				return fmt.Errorf("calls reached %v, want %q", seen, want)
			}
		}
		return nil
	}
}

func dial(t *testing.T, target string, b gresolver.Builder) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithResolvers(b),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestGRPCClientFollowsRegistrations dials corenode:///svc with a real
// gRPC client in front of two health servers: calls reach the registered
// servers, stop reaching one whose registration expired although it still
// serves, and follow a new registration.
func TestGRPCClientFollowsRegistrations(t *testing.T) {
	c := membertest.New(t, 3)
	cli := c.Client()
	ctx := testContext(t)
	addrA, addrB := healthServer(t), healthServer(t)

	holderA := c.Client()
	regA, err := discovery.Register(ctx, holderA, "svc", addrA, ttl)
	if err != nil {
		t.Fatal(err)
	}
	regB, err := discovery.Register(ctx, c.Client(), "svc", addrB, ttl)
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, "corenode:///svc", resolver.NewBuilder(cli))
	eventually(t, 10*time.Second, reachesOnly(ctx, conn, addrA, addrB))

	// etcd's own resolver finds the same endpoints.
	eb, err := etcdresolver.NewBuilder(cli)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, reachesOnly(ctx, dial(t, "etcd:///svc", eb), addrA, addrB))

	// A's holder stops renewing while A keeps serving: once the lease
	// expires, only discovery can keep calls away from A.
	w := watchAfterNow(ctx, t, cli, regA.Key())
	holderA.Close()
	<-regA.Done()
	select {
	case <-w:
	case <-ctx.Done():
		t.Fatal("A's registration never expired")
	}
	eventually(t, 10*time.Second, reachesOnly(ctx, conn, addrB))
	if err := reachesOnly(ctx, conn, addrB)(); err != nil {
		t.Fatalf("after A expired: %v", err)
	}

	regA, err = discovery.Register(ctx, cli, "svc", addrA, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer regA.Deregister(ctx)
	if err := regB.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, reachesOnly(ctx, conn, addrA))
}

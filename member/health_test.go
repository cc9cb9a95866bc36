package member_test

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/member/membertest"
)

func healthClient(t *testing.T, endpoint string) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func check(t *testing.T, hc healthpb.HealthClient) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return resp.Status
}

// nextStatus is the next status a health Watch stream sends within the
// given time; after a failed wait the test's end cancels the stream, which
// ends the receiving goroutine.
func nextStatus(t *testing.T, w healthpb.Health_WatchClient, within time.Duration) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	type answer struct {
		resp *healthpb.HealthCheckResponse
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := w.Recv()
		got <- answer{resp, err}
	}()
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("health watch: %v", a.err)
		}
		return a.resp.Status
	case <-time.After(within):
		t.Fatalf("health watch sent nothing in %v", within)
	}
	return 0
}

// TestGRPCHealth: the client port serves grpc.health.v1 as etcd's does,
// and its verdict is whether the member would serve a linearizable read:
// SERVING on a healthy cluster, NOT_SERVING on a member left without a
// quorum, SERVING again once the quorum is back, and a Watch says each
// change when it happens.
func TestGRPCHealth(t *testing.T) {
	c := membertest.New(t, 3)
	leader := c.WaitLeader()
	for i := range c.Members {
		if got := check(t, healthClient(t, c.Endpoint(i))); got != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("member %d of a healthy cluster: %v, want SERVING", i, got)
		}
	}
	// The leader is the one left: stopping a follower hands nothing over,
	// so the only change its health sees is the quorum lost, and back.
	lone := leader
	hc := healthClient(t, c.Endpoint(lone))
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "etcdserverpb.KV"}); status.Code(err) != codes.NotFound {
		t.Fatalf("check of an unknown service: %v, want NotFound", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := nextStatus(t, w, 5*time.Second); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch on a healthy member: first %v, want SERVING", got)
	}

	others := []int{(lone + 1) % 3, (lone + 2) % 3}
	for _, i := range others {
		c.Stop(i)
	}
	if got := nextStatus(t, w, 10*time.Second); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch once the quorum is gone: %v, want NOT_SERVING", got)
	}
	began := time.Now()
	if got := check(t, hc); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("member without a quorum: %v, want NOT_SERVING", got)
	}
	t.Logf("NOT_SERVING answered in %v", time.Since(began).Round(time.Millisecond))

	c.Restart(others[0])
	if got := nextStatus(t, w, 15*time.Second); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch once the quorum is back: %v, want SERVING", got)
	}
	if got := check(t, hc); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("member with its quorum back: %v, want SERVING", got)
	}
}

// TestGRPCHealthCorruptAndAuth: a member the corruption check named is
// NOT_SERVING (its reads refuse), a Watch says so when the alarm applies
// and again when it is cleared, and with auth on a probe needs no
// credentials, as etcd's.
func TestGRPCHealthCorruptAndAuth(t *testing.T) {
	c := membertest.New(t, 3, cheapBcrypt)
	leader := c.WaitLeader()
	f := (leader + 1) % 3
	hc := healthClient(t, c.Endpoint(f))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := nextStatus(t, w, 5*time.Second); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch on a healthy member: first %v, want SERVING", got)
	}

	cli := c.Client(leader)
	alarm := func(action pb.AlarmRequest_AlarmAction) {
		t.Helper()
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		if _, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(actx,
			&pb.AlarmRequest{Action: action, MemberID: c.Members[f].ID(), Alarm: pb.AlarmType_CORRUPT}); err != nil {
			t.Fatalf("alarm %v CORRUPT: %v", action, err)
		}
	}
	alarm(pb.AlarmRequest_ACTIVATE)
	if got := nextStatus(t, w, 5*time.Second); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch once CORRUPT is raised for the member: %v, want NOT_SERVING", got)
	}
	if got := check(t, hc); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("a member named CORRUPT: %v, want NOT_SERVING", got)
	}
	alarm(pb.AlarmRequest_DEACTIVATE)
	if got := nextStatus(t, w, 5*time.Second); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch once CORRUPT is cleared: %v, want SERVING", got)
	}

	if _, err := cli.UserAdd(ctx, "root", "pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	c.CatchUp(leader)
	if got := check(t, hc); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("with auth on, a check without credentials: %v, want SERVING", got)
	}
}

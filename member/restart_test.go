package member_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/corenode/corenode/member/membertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRestartedMemberNeverServesOlderState restarts a member alone, so it
// cannot learn which entries of its log are committed, and without the
// commit mark it replays at start (node/replay.go; removed here, as a
// power loss can leave it behind the log, or a data dir written before it
// existed has none), it cannot know either. Raft hands its FSM
// only the snapshot at start (here none), so without the start-up gate the
// member answers a serializable read from an empty store with auth off:
// older state than it served before the stop, and a key read without
// credentials that auth, enabled before the stop, protects. With the gate
// it refuses until it has caught up, then answers as before the stop.
func TestRestartedMemberNeverServesOlderState(t *testing.T) {
	c := membertest.New(t, 3, cheapBcrypt)
	leader := c.WaitLeader()
	ctx := ctxT(t)
	cli := c.Client()
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli.Close()
	c.CatchUp(leader)

	lone := (leader + 1) % 3
	for i := range c.Members {
		c.Stop(i)
	}
	if err := os.Remove(filepath.Join(c.Config(lone).DataDir, "commit-mark")); err != nil {
		t.Fatal(err)
	}
	c.Restart(lone)

	// A bare gRPC client: etcd's retries Unavailable until its deadline.
	conn, err := grpc.NewClient(c.Endpoint(lone), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	began := time.Now()
	resp, err := pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte("k"), Serializable: true})
	if err == nil {
		t.Fatalf("a member restarted alone answered a serializable read without credentials: %d keys, revision %d (before the stop: k=v1, auth on)", len(resp.Kvs), resp.Header.Revision)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a member restarted alone: got %v, want Unavailable (catching up)", err)
	}
	t.Logf("refused after %v: %v", time.Since(began).Round(time.Millisecond), err)
	st, err := pb.NewMaintenanceClient(conn).Status(ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatalf("Status of a member catching up (it is exempt from the wait): %v", err)
	}
	if !slices.ContainsFunc(st.Errors, func(e string) bool { return strings.Contains(e, "catching up") }) {
		t.Fatalf("Status of a member catching up: errors %q, want one that says it is catching up", st.Errors)
	}
	if got := check(t, healthpb.NewHealthClient(conn)); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health of a member catching up: %v, want NOT_SERVING", got)
	}

	anon, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoint(lone)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	for i := range c.Members {
		if i != lone {
			c.Restart(i)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := anon.Get(rctx, "k", clientv3.WithSerializable()); err == nil || err.Error() != rpctypes.ErrUserEmpty.Error() {
		t.Fatalf("after the catch-up, a read without credentials: got %v, want %v", err, rpctypes.ErrUserEmpty)
	}
	root := loginAs(t, clientv3.Config{Endpoints: []string{c.Endpoint(lone)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}, "root", "pw")
	defer root.Close()
	got, err := root.Get(rctx, "k", clientv3.WithSerializable())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" {
		t.Fatalf("after the catch-up: got %v, want k=v1", got.Kvs)
	}
}

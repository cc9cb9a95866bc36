package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestStatusNeverGoesBackAfterKill is etcd's robustness finding with the
// real binary: one member, 150 puts, SIGKILL, restart, and Status polled
// as fast as it answers from the first moment the client port accepts.
// corenode answered revision 1 for about 0.6 s, then 151; etcd answers
// 151 from its first reply (run it against etcd with CORENODE_E2E_BINARY).
func TestStatusNeverGoesBackAfterKill(t *testing.T) {
	c, m, cli, ctx := oneMemberWritten(t, 150)
	before, err := cli.Status(ctx, m.clientURL)
	if err != nil {
		t.Fatal(err)
	}
	rev := before.Header.Revision
	c.kill(m)

	addr := strings.TrimPrefix(m.clientURL, "http://")
	if err := c.start(m); err != nil {
		t.Fatal(err)
	}
	for {
		conn, err := net.DialTimeout("tcp", addr, 50*time.Millisecond)
		if err == nil {
			conn.Close()
			break
		}
		if !m.running() {
			t.Fatalf("%s exited after its restart", m.name)
		}
		if ctx.Err() != nil {
			t.Fatalf("the client port never accepted after the restart: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	accepted := time.Now()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mc := pb.NewMaintenanceClient(conn)
	answers, lowest := 0, int64(-1)
	var first time.Duration
	for time.Since(accepted) < 2*time.Second {
		st, err := mc.Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
		if err != nil {
			continue
		}
		if answers == 0 {
			first = time.Since(accepted)
			t.Logf("first answer %v after the port accepted: revision %d, errors %q", first.Round(time.Millisecond), st.Header.Revision, st.Errors)
		}
		answers++
		if lowest < 0 || st.Header.Revision < lowest {
			lowest = st.Header.Revision
		}
	}
	t.Logf("revision %d before SIGKILL; %d answers in the 2 s after the restarted port accepted, lowest revision %d", rev, answers, lowest)
	if answers == 0 {
		t.Fatal("the restarted member answered no Status")
	}
	if lowest < rev {
		t.Fatalf("after SIGKILL and restart Status answered revision %d, lower than the %d it answered before", lowest, rev)
	}
}

// oneMemberWritten starts a one-member cluster of the binary, writes puts
// keys through a client, and returns them with a context of a minute.
func oneMemberWritten(t *testing.T, puts int) (*cluster, *member, *clientv3.Client, context.Context) {
	t.Helper()
	requireEtcdctl(t)
	c := newCluster(t, buildBinary(t), 1)
	c.members = c.members[:1]
	if err := c.startAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy(c.members, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	for range puts {
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	return c, c.members[0], cli, ctx
}

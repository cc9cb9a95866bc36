package member_test

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/member/membertest"
)

// TestEdgeAnswersMatchEtcd: requests at the edges of the watch and lease
// APIs get the answers etcd 3.6 gives (each recorded against etcd 3.6.16
// built from Go modules).
func TestEdgeAnswersMatchEtcd(t *testing.T) {
	c := membertest.New(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := c.Client(0)
	for _, k := range []string{"a", "b"} {
		if _, err := cli.Put(ctx, k, "1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Compact(ctx, 2); err != nil {
		t.Fatal(err)
	}

	// first is the first answer to a new watch.
	first := func(cr *pb.WatchCreateRequest) *pb.WatchResponse {
		t.Helper()
		s, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}}); err != nil {
			t.Fatal(err)
		}
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	refused := []struct {
		name   string
		req    *pb.WatchCreateRequest
		reason string
	}{
		{"range end before key", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a")}, "mvcc: watcher range is empty"},
		{"range end equal to key", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("b")}, "mvcc: watcher range is empty"},
		{"negative start revision", &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: -5}, "etcdserver: mvcc: required revision has been compacted"},
	}
	for _, tc := range refused {
		r := first(tc.req)
		if r.WatchId != -1 || !r.Created || !r.Canceled || r.CancelReason != tc.reason {
			t.Errorf("%s: %v, want watch_id -1, created, canceled, reason %q", tc.name, r, tc.reason)
		}
	}
	for _, cr := range []*pb.WatchCreateRequest{{Key: nil}, {Key: nil, RangeEnd: []byte{0}}} {
		if r := first(cr); !r.Created || r.Canceled {
			t.Errorf("watch on the empty key (range end %q): %v, want created", cr.RangeEnd, r)
		}
	}

	// A compacted start revision: created, then canceled with the compact
	// revision and no reason.
	s, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 1}}})
	if r, err := s.Recv(); err != nil || !r.Created {
		t.Fatalf("compacted watch, first answer: %v %v", r, err)
	}
	if r, err := s.Recv(); err != nil || !r.Canceled || r.CompactRevision != 2 || r.CancelReason != "" {
		t.Fatalf("compacted watch, second answer: %v %v; want canceled, compact_revision 2, no reason", r, err)
	}

	// A negative lease ID is an ID like any other but 0.
	lc := pb.NewLeaseClient(cli.ActiveConnection())
	g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: -7, TTL: 10})
	if err != nil || g.ID != -7 {
		t.Fatalf("grant ID -7: %v %v", g, err)
	}
	if _, err := cli.Put(ctx, "leased", "v", clientv3.WithLease(-7)); err != nil {
		t.Fatalf("put with lease -7: %v", err)
	}
	ttl, err := lc.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: -7, Keys: true})
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 {
		t.Fatalf("time-to-live of lease -7: %v %v", ttl, err)
	}
	if _, err := lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: -7}); err != nil {
		t.Fatalf("revoke -7: %v", err)
	}
}

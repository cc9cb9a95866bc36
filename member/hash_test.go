package member_test

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/member/membertest"
)

// TestHashKVAgreesAcrossMembers: what `etcdctl endpoint hashkv --cluster`
// shows: one value on a healthy cluster, at a common revision and at the
// current one once every member has applied the same entries; Hash, over
// the whole state, agrees too.
func TestHashKVAgreesAcrossMembers(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	cli := c.Client(c.WaitLeader())
	var mid int64
	for i := range 20 {
		p, err := cli.Put(ctx, "/h/"+string(rune('a'+i%5)), "v")
		if err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			mid = p.Header.Revision
		}
	}
	if _, err := cli.Delete(ctx, "/h/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, mid-3); err != nil {
		t.Fatal(err)
	}
	last, err := cli.Put(ctx, "/h/z", "end")
	if err != nil {
		t.Fatal(err)
	}
	// Every member has applied the last write once a linearizable read
	// through it sees the write.
	for i := range c.Members {
		if _, err := c.Client(i).Get(ctx, "/h/z"); err != nil {
			t.Fatal(err)
		}
	}
	var first []uint32
	for i := range c.Members {
		m := c.Client(i).Maintenance
		ep := c.Endpoint(i)
		atMid, err := m.HashKV(ctx, ep, mid)
		if err != nil {
			t.Fatalf("member %d: HashKV(%d): %v", i, mid, err)
		}
		cur, err := m.HashKV(ctx, ep, 0)
		if err != nil {
			t.Fatalf("member %d: HashKV: %v", i, err)
		}
		if cur.HashRevision != last.Header.Revision || cur.CompactRevision != mid-3 || atMid.HashRevision != mid {
			t.Fatalf("member %d: revisions %+v %+v", i, cur, atMid)
		}
		whole, err := pb.NewMaintenanceClient(c.Client(i).ActiveConnection()).Hash(ctx, &pb.HashRequest{})
		if err != nil {
			t.Fatalf("member %d: Hash: %v", i, err)
		}
		got := []uint32{atMid.Hash, cur.Hash, whole.Hash}
		if first == nil {
			first = got
			continue
		}
		for k := range got {
			if got[k] != first[k] {
				t.Fatalf("member %d hashes %v, member 0 %v", i, got, first)
			}
		}
	}
	if first[0] == first[1] {
		t.Fatal("the hash did not change between two revisions with writes between them")
	}
	if _, err := c.Client(0).Maintenance.HashKV(ctx, c.Endpoint(0), mid-4); err == nil {
		t.Fatal("HashKV before the compaction point succeeded")
	}
}

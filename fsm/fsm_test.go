package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/lease"
)

type memSink struct {
	bytes.Buffer
}

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }

func apply(t *testing.T, f *FSM, op Op, msg Message) Result {
	t.Helper()
	return f.Apply(&raft.Log{Type: raft.LogCommand, Data: mustEncode(t, op, msg)}).(Result)
}

func TestApplyValidatesLeasesAtApply(t *testing.T) {
	f := New(nil, nil)
	if r := apply(t, f, OpPut, &pb.PutRequest{Key: []byte("k"), Lease: 7}); !errors.Is(r.Err, rpctypes.ErrGRPCLeaseNotFound) {
		t.Fatalf("put to a missing lease: %v", r.Err)
	}
	if r := apply(t, f, OpLeaseGrant, &pb.LeaseGrantRequest{ID: 7, TTL: 10}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := apply(t, f, OpLeaseGrant, &pb.LeaseGrantRequest{ID: 7, TTL: 10}); !errors.Is(r.Err, rpctypes.ErrGRPCLeaseExist) {
		t.Fatalf("second grant of one ID: %v", r.Err)
	}
	apply(t, f, OpPut, &pb.PutRequest{Key: []byte("k"), Lease: 7})
	rev := f.Store().Rev()
	apply(t, f, OpLeaseExpire, &lease.Expire{IDs: []int64{7, 8}})
	if f.Store().KeyCount() != 0 || f.LeaseCount() != 0 || f.Store().Rev() != rev+1 {
		t.Fatalf("expire: %d keys, %d leases, rev %d", f.Store().KeyCount(), f.LeaseCount(), f.Store().Rev())
	}
}

func TestSnapshotRoundTripWithLeases(t *testing.T) {
	f := New(nil, nil)
	apply(t, f, OpLeaseGrant, &pb.LeaseGrantRequest{ID: 1, TTL: 10})
	apply(t, f, OpPut, &pb.PutRequest{Key: []byte("a"), Value: []byte("1"), Lease: 1})
	apply(t, f, OpLeaseCheckpoint, &lease.Checkpoint{Clock: 500, Expiries: []lease.Expiry{{ID: 1, Expiry: 9000}}})
	apply(t, f, OpPublish, &pb.Member{ID: 3, Name: "m3"})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := New(nil, nil)
	if err := g.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	l, ok := g.Lease(1)
	if !ok || l.Expiry != 9000 || l.TTL != 10 || g.Member(3).GetName() != "m3" || g.Store().Rev() != f.Store().Rev() {
		t.Fatalf("restored lease %+v %v, member %v", l, ok, g.Member(3))
	}
	if keys := g.Store().LeaseKeys(1); len(keys) != 1 {
		t.Fatalf("lease-to-keys index not rebuilt: %q", keys)
	}
	var clock int64
	g.PromoteLeases(func(c int64, _ []lease.Lease) { clock = c })
	if clock != 500 {
		t.Fatalf("lease clock %d", clock)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(mustEncode(f, OpPut, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}))
	f.Add(mustEncode(f, OpLeaseExpire, &lease.Expire{IDs: []int64{1, 2}}))
	f.Add([]byte{1, 99})
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := Decode(data)
		if err != nil {
			return
		}
		again, err := Decode(mustEncode(t, cmd.Op, cmd.Msg))
		if err != nil || again.Op != cmd.Op {
			t.Fatalf("re-encoding broke the command: %v", err)
		}
	})
}

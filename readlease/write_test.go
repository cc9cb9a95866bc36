package readlease

import (
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/lease"
)

func TestWriteOf(t *testing.T) {
	put := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
	}
	del := func(k, end string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
	}
	rng := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("read")}}}
	txn := &pb.TxnRequest{
		Success: []*pb.RequestOp{put("s"), rng, {Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Failure: []*pb.RequestOp{put("nested")}}}}},
		Failure: []*pb.RequestOp{del("f", ""), del("r", "s")},
	}
	w := WriteOf(fsm.Command{Op: fsm.OpTxn, Msg: txn})
	var keys []string
	for _, k := range w.Keys {
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	if want := []string{"f", "nested", "s"}; !slices.Equal(keys, want) {
		t.Errorf("txn keys %q, want %q (both branches, nested, not the read)", keys, want)
	}
	if len(w.Ranges) != 1 || string(w.Ranges[0][0]) != "r" || string(w.Ranges[0][1]) != "s" {
		t.Errorf("txn ranges %q", w.Ranges)
	}
	if w := WriteOf(fsm.Command{Op: fsm.OpPut, Msg: &pb.PutRequest{Key: []byte("p")}}); len(w.Keys) != 1 || string(w.Keys[0]) != "p" || len(w.Ranges) != 0 {
		t.Errorf("put touches %+v", w)
	}
	fromKey := &pb.DeleteRangeRequest{Key: []byte("k"), RangeEnd: []byte{0}}
	if w := WriteOf(fsm.Command{Op: fsm.OpDeleteRange, Msg: fromKey}); len(w.Keys) != 0 || len(w.Ranges) != 1 || string(w.Ranges[0][0]) != "k" || string(w.Ranges[0][1]) != "\x00" {
		t.Errorf("delete from a key on touches %+v", w)
	}
	if w := WriteOf(fsm.Command{Op: fsm.OpTxn, Msg: &pb.TxnRequest{Success: []*pb.RequestOp{rng}}}); !w.Empty() {
		t.Errorf("read-only txn touches %+v", w)
	}
	if w := WriteOf(fsm.Command{Op: fsm.OpLeaseExpire, Msg: &lease.Expire{IDs: []int64{3, 4}}}); !slices.Equal(w.Leases, []int64{3, 4}) {
		t.Errorf("expire leases %v", w.Leases)
	}
	if w := WriteOf(fsm.Command{Op: fsm.OpLeaseRevoke, Msg: &pb.LeaseRevokeRequest{ID: 9}}); !slices.Equal(w.Leases, []int64{9}) {
		t.Errorf("revoke leases %v", w.Leases)
	}
	if w := WriteOf(fsm.Command{Op: fsm.OpCompact, Msg: &pb.CompactionRequest{Revision: 3}}); !w.Empty() {
		t.Errorf("compaction touches %+v", w)
	}
}

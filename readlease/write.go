package readlease

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/lease"
)

// WriteOf returns what cmd may change. Every op that can change or delete a
// key is listed, whichever branch of a Txn runs: the gate holds the write
// before it knows which. Ops that touch no key (grants, checkpoints,
// compaction, alarms, membership) return an empty Write.
func WriteOf(cmd fsm.Command) Write {
	var w Write
	switch m := cmd.Msg.(type) {
	case *pb.PutRequest:
		w.Keys = append(w.Keys, m.Key)
	case *pb.DeleteRangeRequest:
		w.addRange(m.Key, m.RangeEnd)
	case *pb.TxnRequest:
		w.addTxn(m)
	case *pb.LeaseRevokeRequest:
		w.Leases = append(w.Leases, m.ID)
	case *lease.Expire:
		w.Leases = append(w.Leases, m.IDs...)
	}
	return w
}

func (w *Write) addRange(key, end []byte) {
	if len(end) == 0 {
		w.Keys = append(w.Keys, key)
		return
	}
	w.Ranges = append(w.Ranges, [2][]byte{key, end})
}

func (w *Write) addTxn(t *pb.TxnRequest) {
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			switch r := op.Request.(type) {
			case *pb.RequestOp_RequestPut:
				w.Keys = append(w.Keys, r.RequestPut.Key)
			case *pb.RequestOp_RequestDeleteRange:
				w.addRange(r.RequestDeleteRange.Key, r.RequestDeleteRange.RangeEnd)
			case *pb.RequestOp_RequestTxn:
				w.addTxn(r.RequestTxn)
			}
		}
	}
}

package readlease

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lease"
)

// WriteOf returns what cmd may change: every key range it writes
// (kv.Touches), whichever branch of a Txn runs, since the gate holds the
// write before it knows which, and the leases it revokes. Ops that touch no
// key (grants, checkpoints, compaction, alarms, membership) return an
// empty Write.
func WriteOf(cmd fsm.Command) Write {
	var w Write
	switch m := cmd.Msg.(type) {
	case *pb.PutRequest, *pb.DeleteRangeRequest, *pb.TxnRequest:
		for t := range kv.Touches(m) {
			if t.Access != kv.Write {
				continue
			}
			if len(t.End) == 0 {
				w.Keys = append(w.Keys, t.Key)
			} else {
				w.Ranges = append(w.Ranges, [2][]byte{t.Key, t.End})
			}
		}
	case *pb.LeaseRevokeRequest:
		w.Leases = append(w.Leases, m.ID)
	case *lease.Expire:
		w.Leases = append(w.Leases, m.IDs...)
	}
	return w
}

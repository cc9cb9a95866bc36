package transport

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/kv"
)

// Limits are the request limits a member enforces before proposing.
type Limits struct {
	// MaxRequestBytes bounds an encoded write request (--max-request-bytes).
	MaxRequestBytes int
	// MaxTxnOps bounds the compares and the ops of each Txn branch (--max-txn-ops).
	MaxTxnOps int
	// QuotaBackendBytes bounds the store's state (--quota-backend-bytes,
	// see fsm.OverQuota); 0 or less is no quota.
	QuotaBackendBytes int64
}

// Requests are checked here, before they reach Raft, with the same errors
// etcd's server gives, so a client sees exactly what it would see from etcd.
// What depends on state (leases, duplicate keys across nested branches) is
// decided again at apply.

func checkPut(r *pb.PutRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.IgnoreValue && len(r.Value) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.IgnoreLease && r.Lease != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

func checkDeleteRange(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

func checkTxn(r *pb.TxnRequest, maxOps int) error {
	if len(r.Compare) > maxOps || len(r.Success) > maxOps || len(r.Failure) > maxOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if err := checkRequestOp(op, maxOps); err != nil {
				return err
			}
		}
	}
	if err := checkDuplicates(r.Success); err != nil {
		return err
	}
	return checkDuplicates(r.Failure)
}

func checkRequestOp(op *pb.RequestOp, maxOps int) error {
	switch u := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		return kv.CheckRange(u.RequestRange)
	case *pb.RequestOp_RequestPut:
		return checkPut(u.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		return checkDeleteRange(u.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		return checkTxn(u.RequestTxn, maxOps)
	case nil:
		return rpctypes.ErrGRPCKeyNotFound
	}
	return nil
}

// checkDuplicates refuses a branch that writes one key twice, as etcd does:
// two puts of one key, or a put inside a deleted range, across nested txns.
func checkDuplicates(ops []*pb.RequestOp) error {
	puts := map[string]struct{}{}
	var dels []keyRange
	var walk func(ops []*pb.RequestOp) error
	walk = func(ops []*pb.RequestOp) error {
		for _, op := range ops {
			switch u := op.Request.(type) {
			case *pb.RequestOp_RequestPut:
				k := string(u.RequestPut.Key)
				if _, dup := puts[k]; dup {
					return rpctypes.ErrGRPCDuplicateKey
				}
				puts[k] = struct{}{}
			case *pb.RequestOp_RequestDeleteRange:
				dels = append(dels, keyRange{u.RequestDeleteRange.Key, u.RequestDeleteRange.RangeEnd})
			case *pb.RequestOp_RequestTxn:
				// Only one branch of a nested txn runs, so each branch is
				// checked against the outer ops separately.
				saved := len(dels)
				savedPuts := clonePuts(puts)
				if err := walk(u.RequestTxn.Success); err != nil {
					return err
				}
				dels, puts = dels[:saved], savedPuts
				savedPuts = clonePuts(puts)
				if err := walk(u.RequestTxn.Failure); err != nil {
					return err
				}
				dels, puts = dels[:saved], savedPuts
			}
		}
		return nil
	}
	if err := walk(ops); err != nil {
		return err
	}
	for k := range puts {
		for _, d := range dels {
			if d.contains([]byte(k)) {
				return rpctypes.ErrGRPCDuplicateKey
			}
		}
	}
	return nil
}

func clonePuts(m map[string]struct{}) map[string]struct{} {
	c := make(map[string]struct{}, len(m))
	for k := range m {
		c[k] = struct{}{}
	}
	return c
}

type keyRange struct{ key, end []byte }

func (r keyRange) contains(k []byte) bool {
	switch {
	case len(r.end) == 0:
		return string(k) == string(r.key)
	case len(r.end) == 1 && r.end[0] == 0:
		return string(k) >= string(r.key)
	}
	return string(k) >= string(r.key) && string(k) < string(r.end)
}

// isReadOnlyTxn reports whether a txn writes nothing in any branch, so it
// can be served as a linearizable read without a log entry.
func isReadOnlyTxn(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch u := op.Request.(type) {
			case *pb.RequestOp_RequestPut, *pb.RequestOp_RequestDeleteRange:
				return false
			case *pb.RequestOp_RequestTxn:
				if !isReadOnlyTxn(u.RequestTxn) {
					return false
				}
			}
		}
	}
	return true
}

package kv

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Requests are checked before they reach raft (CheckRange, CheckPut,
// CheckDeleteRange, CheckTxn), with the errors etcd's server gives, so a
// bad request never leaves the member and a client sees what it would see
// from etcd. What depends on state (leases, duplicate keys across nested
// branches) is decided again at apply.

// CheckPut validates a Put request.
func CheckPut(r *pb.PutRequest) error {
	if r == nil || len(r.Key) == 0 {
		return ErrEmptyKey
	}
	if r.IgnoreValue && len(r.Value) != 0 {
		return ErrValueProvided
	}
	if r.IgnoreLease && r.Lease != 0 {
		return ErrLeaseProvided
	}
	return nil
}

// CheckDeleteRange validates a DeleteRange request.
func CheckDeleteRange(r *pb.DeleteRangeRequest) error {
	if r == nil || len(r.Key) == 0 {
		return ErrEmptyKey
	}
	return nil
}

// CheckTxn validates a Txn request whose compares and branches may hold
// at most maxOps each.
func CheckTxn(r *pb.TxnRequest, maxOps int) error {
	if len(r.Compare) > maxOps || len(r.Success) > maxOps || len(r.Failure) > maxOps {
		return ErrTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return ErrEmptyKey
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
		return CheckRange(u.RequestRange)
	case *pb.RequestOp_RequestPut:
		return CheckPut(u.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		return CheckDeleteRange(u.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		return CheckTxn(u.RequestTxn, maxOps)
	case nil:
		return ErrKeyNotFound
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
					return ErrDuplicateKey
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
				return ErrDuplicateKey
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
func IsReadOnlyTxn(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch u := op.Request.(type) {
			case *pb.RequestOp_RequestPut, *pb.RequestOp_RequestDeleteRange:
				return false
			case *pb.RequestOp_RequestTxn:
				if !IsReadOnlyTxn(u.RequestTxn) {
					return false
				}
			}
		}
	}
	return true
}

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
// at most maxOps each, nested txns included. Of several faults, the first
// in this order is reported: a txn's size, its compares, its ops (a nested
// txn's checks in its place), then its duplicate keys (see txnDups).
func CheckTxn(r *pb.TxnRequest, maxOps int) error {
	return walk(r, &proposeCheck{maxOps: maxOps})
}

// checkTouch makes etcd's stateless checks of one compare or op.
func checkTouch(t Touch) error {
	switch r := t.Req.(type) {
	case *pb.Compare:
		if len(r.Key) == 0 {
			return ErrEmptyKey
		}
	case *pb.RangeRequest:
		return CheckRange(r)
	case *pb.PutRequest:
		return CheckPut(r)
	case *pb.DeleteRangeRequest:
		return CheckDeleteRange(r)
	}
	return nil
}

// proposeCheck is CheckTxn's walker. txns are the txns open in the walk,
// innermost last.
type proposeCheck struct {
	maxOps int
	txns   []*txnDups
}

// txnDups is etcd's duplicate-key rule for one txn, checked once its ops
// are: within one branch, a put may not repeat a put made earlier in that
// branch or in a nested txn's branch it runs in (only one branch of a
// nested txn runs, so its two branches are apart), and the branch's own
// puts may not fall into its own deleted ranges. (kv.Txn checks the wider,
// symmetric rule again at apply.)
type txnDups struct {
	branches [2]branchDups // success, failure
	cur      int           // the branch being walked
	dup      bool          // a put repeats one of this txn's
}

type branchDups struct {
	puts map[string]struct{}
	dels []span
}

func (c *proposeCheck) txn(t *pb.TxnRequest) error {
	if len(t.Compare) > c.maxOps || len(t.Success) > c.maxOps || len(t.Failure) > c.maxOps {
		return ErrTooManyOps
	}
	c.txns = append(c.txns, &txnDups{})
	return nil
}

func (c *proposeCheck) enter(_ *pb.TxnRequest, success bool) error {
	if !success {
		c.txns[len(c.txns)-1].cur = 1
	}
	return nil
}

func (c *proposeCheck) touch(t Touch) error {
	if err := checkTouch(t); err != nil {
		return err
	}
	if t.Access != Write {
		return nil
	}
	d := c.txns[len(c.txns)-1]
	b := &d.branches[d.cur]
	if _, del := t.Req.(*pb.DeleteRangeRequest); del {
		b.dels = append(b.dels, mkSpan(t.Key, t.End))
		return nil
	}
	// The innermost txn whose open branch put the key ends first: its
	// check is the one that fails.
	for i := len(c.txns) - 1; i >= 0; i-- {
		o := c.txns[i]
		if _, dup := o.branches[o.cur].puts[string(t.Key)]; dup {
			o.dup = true
			break
		}
	}
	if b.puts == nil {
		b.puts = map[string]struct{}{}
	}
	b.puts[string(t.Key)] = struct{}{}
	return nil
}

func (c *proposeCheck) leave(_ *pb.TxnRequest, success bool) error {
	if success {
		return nil
	}
	d := c.txns[len(c.txns)-1]
	c.txns = c.txns[:len(c.txns)-1]
	if d.dup {
		return ErrDuplicateKey
	}
	for _, b := range d.branches {
		for k := range b.puts {
			for _, sp := range b.dels {
				if sp.contains([]byte(k)) {
					return ErrDuplicateKey
				}
			}
		}
	}
	return nil
}

func (c *proposeCheck) noRequest() error { return ErrKeyNotFound }

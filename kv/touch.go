package kv

import (
	"errors"
	"iter"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Which keys a request touches is answered here once, for every rule that
// asks: the read-lease write gate, auth's checks, validation before a
// request is proposed, a Txn's checks at apply and the space quota. The
// public answer is Touches; kv's own checks that need a Txn's shape as
// well (which ops can run together) walk the same structure with walk.

// Access says what a request does with a key range.
type Access uint8

const (
	// Read is a Range, or a Txn's Compare.
	Read Access = iota + 1
	// Write is a Put (one key) or a DeleteRange.
	Write
)

// Touch is one key range a request reads or writes.
type Touch struct {
	Access Access
	// Key and End are etcd's range: End empty is Key alone, End "\x00"
	// every key from Key on, any other End the keys in [Key, End) (none
	// when End <= Key).
	Key, End []byte
	// Req is the message the range comes from, for rules that need more
	// than the range (auth reads a put's lease and prev_kv): a
	// *pb.RangeRequest, *pb.Compare, *pb.PutRequest or
	// *pb.DeleteRangeRequest, never a nil one.
	Req any
}

// Touches returns the key ranges req reads or writes, in request order:
// a Txn's compares, then its success ops, then its failure ops, a nested
// Txn's in its place. Both branches of every Txn are listed: which one
// runs is only known at apply. req is a *pb.RangeRequest, *pb.PutRequest,
// *pb.DeleteRangeRequest or *pb.TxnRequest; any other touches no key.
func Touches(req any) iter.Seq[Touch] {
	return func(yield func(Touch) bool) {
		_ = walk(req, yielder(yield))
	}
}

// IsReadOnlyTxn reports whether a txn writes nothing in any branch, so it
// can be served as a linearizable read without a log entry.
func IsReadOnlyTxn(r *pb.TxnRequest) bool {
	for t := range Touches(r) {
		if t.Access == Write {
			return false
		}
	}
	return true
}

// walker hears a request's parts as walk finds them, in request order.
// For a Txn: txn, its compares (touch), enter(true), its success ops,
// leave(true), enter(false), its failure ops, leave(false). Each op of a
// branch is one touch, one nested Txn, or one noRequest. Any method may
// stop the walk with an error, which walk returns.
type walker interface {
	touch(t Touch) error
	txn(t *pb.TxnRequest) error
	enter(t *pb.TxnRequest, success bool) error
	leave(t *pb.TxnRequest, success bool) error
	// noRequest is an op of a branch that names no request.
	noRequest() error
}

// walk is the one descent into a request; see walker.
func walk(req any, w walker) error {
	switch r := req.(type) {
	case *pb.RangeRequest:
		if r == nil {
			r = &pb.RangeRequest{}
		}
		return w.touch(Touch{Access: Read, Key: r.Key, End: r.RangeEnd, Req: r})
	case *pb.PutRequest:
		if r == nil {
			r = &pb.PutRequest{}
		}
		return w.touch(Touch{Access: Write, Key: r.Key, Req: r})
	case *pb.DeleteRangeRequest:
		if r == nil {
			r = &pb.DeleteRangeRequest{}
		}
		return w.touch(Touch{Access: Write, Key: r.Key, End: r.RangeEnd, Req: r})
	case *pb.TxnRequest:
		return walkTxn(r, w)
	}
	return nil
}

func walkTxn(t *pb.TxnRequest, w walker) error {
	if t == nil {
		t = &pb.TxnRequest{}
	}
	if err := w.txn(t); err != nil {
		return err
	}
	for _, c := range t.Compare {
		if c == nil {
			c = &pb.Compare{}
		}
		if err := w.touch(Touch{Access: Read, Key: c.Key, End: c.RangeEnd, Req: c}); err != nil {
			return err
		}
	}
	for _, success := range [2]bool{true, false} {
		if err := w.enter(t, success); err != nil {
			return err
		}
		for _, op := range branch(t, success) {
			if err := walkOp(op, w); err != nil {
				return err
			}
		}
		if err := w.leave(t, success); err != nil {
			return err
		}
	}
	return nil
}

func walkOp(op *pb.RequestOp, w walker) error {
	switch v := op.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		return walk(v.RequestRange, w)
	case *pb.RequestOp_RequestPut:
		return walk(v.RequestPut, w)
	case *pb.RequestOp_RequestDeleteRange:
		return walk(v.RequestDeleteRange, w)
	case *pb.RequestOp_RequestTxn:
		return walkTxn(v.RequestTxn, w)
	}
	return w.noRequest()
}

// errStop ends a walk its consumer broke out of.
var errStop = errors.New("kv: walk stopped")

// yielder is Touches' walker: it passes the touches on and ignores the
// shape.
type yielder func(Touch) bool

func (y yielder) touch(t Touch) error {
	if !y(t) {
		return errStop
	}
	return nil
}

func (yielder) txn(*pb.TxnRequest) error         { return nil }
func (yielder) enter(*pb.TxnRequest, bool) error { return nil }
func (yielder) leave(*pb.TxnRequest, bool) error { return nil }
func (yielder) noRequest() error                 { return nil }

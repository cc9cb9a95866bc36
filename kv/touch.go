package kv

import (
	"iter"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Which keys a request touches is answered here once, for every rule that
// asks: the read-lease write gate, auth's checks, validation before a
// request is proposed, a Txn's checks at apply and the space quota. The
// public answer is Touches; kv's own checks that need a Txn's shape as
// well (which ops can run together) read the same walk's steps.

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
	// every key from Key on, any other End the keys in [Key, End).
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
		var buf [16]step
		for _, s := range walk(req, buf[:0]) {
			if s.kind == stepTouch && !yield(s.Touch) {
				return
			}
		}
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

// A step is one part of a request as walk finds it: a key range, or, for
// kv's own checks that need a Txn's shape (which ops can run together),
// where a txn or one of its branches begins and ends.
type step struct {
	kind    stepKind
	success bool           // stepEnter, stepLeave: which branch
	txn     *pb.TxnRequest // stepTxn
	Touch                  // stepTouch
}

type stepKind uint8

const (
	// stepTouch is a key range: a Range, Put or DeleteRange (the request,
	// or an op of a branch), or a compare.
	stepTouch stepKind = iota
	// stepTxn begins a txn: the request, or an op of a branch. Its
	// compares follow, then its success branch, then its failure branch.
	stepTxn
	// stepEnter begins a branch's ops.
	stepEnter
	// stepLeave ends a branch's ops; the failure branch's ends its txn.
	stepLeave
	// stepNoRequest is an op of a branch that names no request.
	stepNoRequest
)

// walk is the one descent into a request: it appends req's steps to steps
// in request order and returns the result. Each op of a branch is one
// step: a touch, a nested txn's stepTxn, or stepNoRequest. A nil message
// is walked as an empty one.
func walk(req any, steps []step) []step {
	if t, ok := req.(*pb.TxnRequest); ok {
		return walkTxn(t, steps)
	}
	if t, ok := touchOf(req); ok {
		return append(steps, step{Touch: t})
	}
	return steps
}

// walkTxn is walk of a txn. Only it recurses, so a caller's buffer for
// the steps can stay on its stack.
func walkTxn(t *pb.TxnRequest, steps []step) []step {
	if t == nil {
		t = &pb.TxnRequest{}
	}
	steps = append(steps, step{kind: stepTxn, txn: t})
	for _, c := range t.Compare {
		if c == nil {
			c = &pb.Compare{}
		}
		steps = append(steps, step{Touch: Touch{Access: Read, Key: c.Key, End: c.RangeEnd, Req: c}})
	}
	for i, ops := range [2][]*pb.RequestOp{t.Success, t.Failure} {
		success := i == 0
		steps = append(steps, step{kind: stepEnter, success: success})
		for _, op := range ops {
			var req any
			switch v := op.GetRequest().(type) {
			case *pb.RequestOp_RequestTxn:
				steps = walkTxn(v.RequestTxn, steps)
				continue
			case *pb.RequestOp_RequestRange:
				req = v.RequestRange
			case *pb.RequestOp_RequestPut:
				req = v.RequestPut
			case *pb.RequestOp_RequestDeleteRange:
				req = v.RequestDeleteRange
			}
			if t, ok := touchOf(req); ok {
				steps = append(steps, step{Touch: t})
			} else {
				steps = append(steps, step{kind: stepNoRequest})
			}
		}
		steps = append(steps, step{kind: stepLeave, success: success})
	}
	return steps
}

// touchOf returns the key range of a Range, Put or DeleteRange.
func touchOf(req any) (Touch, bool) {
	switch r := req.(type) {
	case *pb.RangeRequest:
		if r == nil {
			r = &pb.RangeRequest{}
		}
		return Touch{Access: Read, Key: r.Key, End: r.RangeEnd, Req: r}, true
	case *pb.PutRequest:
		if r == nil {
			r = &pb.PutRequest{}
		}
		return Touch{Access: Write, Key: r.Key, Req: r}, true
	case *pb.DeleteRangeRequest:
		if r == nil {
			r = &pb.DeleteRangeRequest{}
		}
		return Touch{Access: Write, Key: r.Key, End: r.RangeEnd, Req: r}, true
	}
	return Touch{}, false
}

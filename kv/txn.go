package kv

import (
	"bytes"
	"cmp"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Txn runs a transaction all or nothing. As in etcd, every compare (nested
// ones included) is evaluated against the state before the txn, the chosen
// ops are validated completely before the first write, and reads inside the
// txn see the txn's earlier writes. A txn that writes uses exactly one new
// revision.
func (s *Store) Txn(t *pb.TxnRequest) (*pb.TxnResponse, error) {
	if t == nil {
		t = &pb.TxnRequest{}
	}
	readOnly, err := checkTxn(t)
	if err != nil {
		return nil, err
	}
	if readOnly {
		// Nothing to write, so concurrent readers may share the lock.
		s.mu.RLock()
		defer s.mu.RUnlock()
	} else {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	path := s.txnPath(t, nil)
	if _, err := s.checkTxnState(t, path, 0); err != nil {
		return nil, err
	}
	c := s.begin()
	resp, _ := s.execTxn(&c, t, path, 0)
	s.commit(&c)
	resp.Header.Revision = s.rev
	return resp, nil
}

func nestedTxn(v *pb.RequestOp_RequestTxn) *pb.TxnRequest {
	if v.RequestTxn == nil {
		return &pb.TxnRequest{}
	}
	return v.RequestTxn
}

// checkTxn is what Txn checks of a request before it takes the lock, in
// one walk: etcd's stateless checks of every compare and op in both
// branches (the first fault is reported), that no two ops that can run
// together write one key (checkIntervals), and whether it writes at all.
//
// A branch's writes, its nested txns' included, are the top of two
// stacks, each tagged with the op of the branch it comes from: a nested
// txn's writes are checked as each of its branches ends, then stay, tagged
// as the txn's, for the branch that holds it.
func checkTxn(t *pb.TxnRequest) (readOnly bool, err error) {
	var (
		buf     [16]step
		unitBuf [4]int
		markBuf [4][2]int
		putBuf  [8]taggedKey
		delBuf  [4]taggedSpan
	)
	units := unitBuf[:0] // per open txn: the tag its writes carry above it
	marks := markBuf[:0] // per open branch: where its puts and dels begin
	puts, dels := putBuf[:0], delBuf[:0]
	writes, dup, next := false, false, 0
	for _, s := range walk(t, buf[:0]) {
		switch s.kind {
		case stepTxn:
			next++
			units = append(units, next)
		case stepEnter:
			marks = append(marks, [2]int{len(puts), len(dels)})
		case stepTouch:
			if err := checkTouch(s.Touch); err != nil {
				return false, err
			}
			if s.Access != Write {
				continue
			}
			writes = true
			next++
			if _, del := s.Req.(*pb.DeleteRangeRequest); del {
				dels = append(dels, taggedSpan{mkSpan(s.Key, s.End), next})
			} else {
				puts = append(puts, taggedKey{s.Key, next})
			}
		case stepLeave:
			m := marks[len(marks)-1]
			marks = marks[:len(marks)-1]
			if checkIntervals(puts[m[0]:], dels[m[1]:]) {
				dup = true
			}
			unit := units[len(units)-1]
			if !s.success {
				units = units[:len(units)-1]
			}
			if len(marks) == 0 {
				// A top branch: the other is checked apart.
				puts, dels = puts[:m[0]], dels[:m[1]]
				continue
			}
			for i := m[0]; i < len(puts); i++ {
				puts[i].unit = unit
			}
			for i := m[1]; i < len(dels); i++ {
				dels[i].unit = unit
			}
		}
	}
	if dup {
		return false, ErrDuplicateKey
	}
	return !writes, nil
}

type taggedKey struct {
	key  []byte
	unit int
}

type taggedSpan struct {
	sp   span
	unit int
}

// checkIntervals reports whether two different ops of a branch write the
// same key: put/put or put/delete, a nested txn's writes counting as one
// op's. The two branches of one nested txn never both run, so they may
// overlap each other (each is checked on its own as it ends).
// Delete/delete overlap is harmless and allowed, as in etcd.
//
// Unlike etcd's checkIntervals this is symmetric (a nested txn's puts are
// checked against the deletes of every sibling, not only earlier ones) and
// treats a "\x00" range end as unbounded.
func checkIntervals(puts []taggedKey, dels []taggedSpan) bool {
	if len(puts) == 0 || len(puts)+len(dels) < 2 {
		return false
	}
	slices.SortStableFunc(puts, func(a, b taggedKey) int { return bytes.Compare(a.key, b.key) })
	for i := 1; i < len(puts); i++ {
		if puts[i].unit != puts[i-1].unit && bytes.Equal(puts[i].key, puts[i-1].key) {
			return true
		}
	}
	for _, d := range dels {
		i, _ := slices.BinarySearchFunc(puts, d.sp.key, func(p taggedKey, k []byte) int { return bytes.Compare(p.key, k) })
		for ; i < len(puts) && d.sp.contains(puts[i].key); i++ {
			if puts[i].unit != d.unit {
				return true
			}
		}
	}
	return false
}

// txnPath evaluates the compares of t and of every nested txn on the chosen
// branches, in pre-order, before anything is written (like etcd).
func (s *Store) txnPath(t *pb.TxnRequest, path []bool) []bool {
	ok := true
	for _, c := range t.Compare {
		if !s.compare(c) {
			ok = false
			break
		}
	}
	path = append(path, ok)
	for _, op := range branch(t, ok) {
		if v, isTxn := op.GetRequest().(*pb.RequestOp_RequestTxn); isTxn {
			path = s.txnPath(nestedTxn(v), path)
		}
	}
	return path
}

func branch(t *pb.TxnRequest, ok bool) []*pb.RequestOp {
	if ok {
		return t.Success
	}
	return t.Failure
}

// compare follows etcd: every live key in the range must satisfy it; an
// empty range compares a zero KeyValue, except that a VALUE compare on
// missing keys always fails.
func (s *Store) compare(c *pb.Compare) bool {
	found, ok := false, true
	s.scan(mkSpan(c.Key, c.RangeEnd), func(e *keyEntry) bool {
		r := e.latest()
		if r == nil {
			return true
		}
		found = true
		ok = compareKV(c, &r.kv)
		return ok
	})
	if !found {
		if c.Target == pb.Compare_VALUE {
			return false
		}
		return compareKV(c, &mvccpb.KeyValue{})
	}
	return ok
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var res int
	switch c.Target {
	case pb.Compare_VALUE:
		res = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		res = cmp.Compare(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		res = cmp.Compare(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		res = cmp.Compare(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		res = cmp.Compare(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return res == 0
	case pb.Compare_NOT_EQUAL:
		return res != 0
	case pb.Compare_GREATER:
		return res > 0
	case pb.Compare_LESS:
		return res < 0
	}
	return true
}

// checkTxnState validates, against the state before the txn, every op that
// will run; it returns the position in path after t. Checking the pre-txn
// state is exact because checkIntervals forbids a txn from writing a key
// twice.
func (s *Store) checkTxnState(t *pb.TxnRequest, path []bool, i int) (int, error) {
	ok := path[i]
	i++
	for _, op := range branch(t, ok) {
		var err error
		switch v := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			err = s.checkRangeRev(v.RequestRange.Revision)
		case *pb.RequestOp_RequestPut:
			err = s.checkPutState(v.RequestPut)
		case *pb.RequestOp_RequestTxn:
			i, err = s.checkTxnState(nestedTxn(v), path, i)
		}
		if err != nil {
			return 0, err
		}
	}
	return i, nil
}

// execTxn applies the validated branch of t; it cannot fail.
func (s *Store) execTxn(c *change, t *pb.TxnRequest, path []bool, i int) (*pb.TxnResponse, int) {
	ok := path[i]
	i++
	ops := branch(t, ok)
	resp := &pb.TxnResponse{Succeeded: ok, Responses: make([]*pb.ResponseOp, len(ops))}
	for j, op := range ops {
		ro := &pb.ResponseOp{}
		switch v := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			ro.Response = &pb.ResponseOp_ResponseRange{ResponseRange: s.doRange(v.RequestRange, s.viewRev(c))}
		case *pb.RequestOp_RequestPut:
			ro.Response = &pb.ResponseOp_ResponsePut{ResponsePut: s.doPut(c, v.RequestPut)}
		case *pb.RequestOp_RequestDeleteRange:
			ro.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: s.doDelete(c, v.RequestDeleteRange)}
		case *pb.RequestOp_RequestTxn:
			var sub *pb.TxnResponse
			sub, i = s.execTxn(c, nestedTxn(v), path, i)
			ro.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: sub}
		}
		resp.Responses[j] = ro
	}
	resp.Header = &pb.ResponseHeader{Revision: s.viewRev(c)}
	return resp, i
}

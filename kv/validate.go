package kv

import (
	"bytes"

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
// txn's checks in its place), then its duplicate keys.
//
// The duplicate-key rule is etcd's, checked for each txn once its ops are:
// within one branch, a put may not repeat a put made earlier in that
// branch or in a nested txn's branch it runs in (only one branch of a
// nested txn runs, so its two branches are apart), and a branch's own puts
// may not fall into its own deleted ranges. (Txn checks the wider,
// symmetric rule again at apply.) The puts and deletes of the open
// branches are kept on two stacks, outer branches' first; a branch's
// entries are dropped when it ends.
func CheckTxn(r *pb.TxnRequest, maxOps int) error {
	var (
		buf     [16]step
		txnBuf  [4]dupTxn
		openBuf [8]openPut
		delBuf  [4]span
	)
	txns, open, dels := txnBuf[:0], openBuf[:0], delBuf[:0] // of the open txns and branches
	var index map[string]int                                // a key's latest entry in open, once open is long
	for _, s := range walk(r, buf[:0]) {
		switch s.kind {
		case stepTxn:
			t := s.txn
			if len(t.Compare) > maxOps || len(t.Success) > maxOps || len(t.Failure) > maxOps {
				return ErrTooManyOps
			}
			txns = append(txns, dupTxn{})
		case stepEnter:
			t := &txns[len(txns)-1]
			t.puts, t.dels = len(open), len(dels)
		case stepNoRequest:
			return ErrKeyNotFound
		case stepTouch:
			if err := checkTouch(s.Touch); err != nil {
				return err
			}
			if _, del := s.Req.(*pb.DeleteRangeRequest); del {
				dels = append(dels, mkSpan(s.Key, s.End))
			} else if s.Access == Write {
				prev := findPut(open, index, s.Key)
				if prev >= 0 {
					// The innermost txn whose open branch put the key
					// ends first: its check is the one that fails.
					txns[open[prev].txn].dup = true
				}
				open = append(open, openPut{key: s.Key, txn: len(txns) - 1, prev: prev})
				index = indexPuts(index, open)
			}
		case stepLeave:
			t := &txns[len(txns)-1]
			if putInDels(open[t.puts:], dels[t.dels:]) {
				t.dup = true
			}
			unindexPuts(index, open[t.puts:])
			open, dels = open[:t.puts], dels[:t.dels]
			if s.success {
				continue
			}
			dup := t.dup
			txns = txns[:len(txns)-1]
			if dup {
				return ErrDuplicateKey
			}
		}
	}
	return nil
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

// dupTxn is CheckTxn's record of one open txn.
type dupTxn struct {
	dup        bool // a duplicate its check reports
	puts, dels int  // where its open branch's entries begin
}

// openPut is a put of an open branch.
type openPut struct {
	key  []byte
	txn  int // the txn whose open branch put it
	prev int // the entry of the same key before it, or -1
}

// indexFrom is the length of a list of puts from which keys are looked up
// in a map rather than searched.
const indexFrom = 32

// findPut returns the latest entry in open that puts key, or -1.
func findPut(open []openPut, index map[string]int, key []byte) int {
	if index != nil {
		if i, ok := index[string(key)]; ok {
			return i
		}
		return -1
	}
	for i := len(open) - 1; i >= 0; i-- {
		if bytes.Equal(open[i].key, key) {
			return i
		}
	}
	return -1
}

// indexPuts records open's last entry in index, making index once open is
// long.
func indexPuts(index map[string]int, open []openPut) map[string]int {
	switch {
	case index != nil:
		index[string(open[len(open)-1].key)] = len(open) - 1
	case len(open) >= indexFrom:
		index = make(map[string]int, len(open))
		for i, p := range open {
			index[string(p.key)] = i
		}
	}
	return index
}

// unindexPuts forgets dropped, the last entries of open, in index.
func unindexPuts(index map[string]int, dropped []openPut) {
	for i := len(dropped) - 1; index != nil && i >= 0; i-- {
		if p := dropped[i]; p.prev < 0 {
			delete(index, string(p.key))
		} else {
			index[string(p.key)] = p.prev
		}
	}
}

// putInDels reports whether one of puts falls into one of dels.
func putInDels(puts []openPut, dels []span) bool {
	for _, p := range puts {
		for _, sp := range dels {
			if sp.contains(p.key) {
				return true
			}
		}
	}
	return false
}

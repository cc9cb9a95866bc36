package kv

import (
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Compact drops the history before rev: each key keeps its newest record at
// or below rev unless that record is a tombstone, and everything newer.
// Ranges at rev and later are unaffected; earlier ones get ErrGRPCCompacted.
func (s *Store) Compact(rev int64) (*pb.CompactionResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.compactRev {
		return nil, ErrCompacted
	}
	if rev > s.rev {
		return nil, ErrFutureRev
	}
	split := countUpTo(s.log, rev)
	s.keepCompactionHash(split, rev)
	suffix := s.log[split:]

	// One walk of the index, no per-record lookups: each key with records
	// at or below rev keeps the newest of them unless it is a tombstone,
	// and loses the rest.
	type loss struct {
		e    *keyEntry
		drop int
	}
	var kept []*record
	var losses []loss
	s.tree.Ascend(func(e *keyEntry) bool {
		cut := countUpTo(e.recs, rev)
		if cut == 0 {
			return true
		}
		drop := cut
		if last := e.recs[cut-1]; !last.tomb {
			kept = append(kept, last)
			drop--
		}
		if drop > 0 {
			for _, r := range e.recs[:drop] {
				s.size.Add(-r.cost())
			}
			losses = append(losses, loss{e, drop})
		}
		return true
	})
	// The log is in revision order; the walk was in key order.
	slices.SortFunc(kept, func(a, b *record) int {
		if a.before(b) {
			return -1
		}
		return 1
	})

	// A new slice, never an in-place rewrite: snapshots may hold the old one.
	log := make([]*record, 0, len(kept)+len(suffix)+len(suffix)/4+16)
	log = append(log, kept...)
	log = append(log, suffix...)

	for _, l := range losses {
		if l.drop == len(l.e.recs) {
			s.dropEntry(l.e)
			continue
		}
		// Clone so the dropped records are not pinned by the old array.
		l.e.recs = slices.Clone(l.e.recs[l.drop:])
	}

	s.log = log
	s.compactRev = rev
	return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: s.rev}}, nil
}

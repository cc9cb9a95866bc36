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
	old, suffix := s.log[:split], s.log[split:]

	// Every key with a record at or below rev has one in old, so walking old
	// reaches exactly the entries that lose something. Each entry's cut
	// (how many of its records are at or below rev) is computed once,
	// stamped with rev, which grows from one compaction to the next.
	var touched []*keyEntry
	kept := 0
	for _, r := range old {
		e := s.keys[string(r.kv.Key)]
		if e.compactStamp != rev {
			e.compactStamp = rev
			e.compactCut = countUpTo(e.recs, rev)
			touched = append(touched, e)
			if !e.recs[e.compactCut-1].tomb {
				kept++
			}
		}
	}

	// A new slice, never an in-place rewrite: snapshots may hold the old one.
	log := make([]*record, 0, kept+len(suffix)+len(suffix)/4+16)
	for _, r := range old {
		e := s.keys[string(r.kv.Key)]
		if last := e.recs[e.compactCut-1]; last == r && !r.tomb {
			log = append(log, r)
		} else {
			s.size.Add(-r.cost())
		}
	}
	log = append(log, suffix...)

	for _, e := range touched {
		drop := e.compactCut
		if !e.recs[drop-1].tomb {
			drop--
		}
		if drop == 0 {
			continue
		}
		if drop == len(e.recs) {
			s.dropEntry(e)
			continue
		}
		// Clone so the dropped records are not pinned by the old array.
		e.recs = slices.Clone(e.recs[drop:])
	}

	s.log = log
	s.compactRev = rev
	return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: s.rev}}, nil
}

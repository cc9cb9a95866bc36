package kv

import (
	"bytes"
	"fmt"
	"iter"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Record is one change of one key as a snapshot holds it, in the terms of
// etcd's backend, where each is a value under its (main, sub) revision:
// KV is the key's version after the change (of a tombstone only Key and
// ModRevision are set), Sub the change's place within its main revision.
type Record struct {
	KV        mvccpb.KeyValue
	Sub       int64
	Tombstone bool
}

// NewSnapshot builds the snapshot of a store at revision rev whose history
// before compactRev is gone, from its records in (revision, sub) order: what
// another system's backup of the same store holds. It checks what Restore
// checks of a snapshot file. The records are copied; their byte slices are
// kept and must not change afterwards.
func NewSnapshot(rev, compactRev int64, recs []Record) (*Snapshot, error) {
	if rev < 1 || compactRev < 0 || compactRev > rev {
		return nil, fmt.Errorf("kv: %w: revisions rev=%d compact=%d", errCorrupt, rev, compactRev)
	}
	slab := make([]record, len(recs))
	log := make([]*record, len(recs))
	var prev *record
	for i := range recs {
		r := &slab[i]
		in := &recs[i]
		r.sub, r.tomb = in.Sub, in.Tombstone
		if r.tomb {
			r.kv = mvccpb.KeyValue{Key: in.KV.Key, ModRevision: in.KV.ModRevision}
		} else {
			r.kv = in.KV
		}
		if err := checkRecord(prev, r, rev); err != nil {
			return nil, fmt.Errorf("kv: %w", err)
		}
		log[i] = r
		prev = r
	}
	return &Snapshot{rev: rev, compactRev: compactRev, log: log}, nil
}

// checkRecord reports what makes r, following prev (nil for the first),
// impossible in the history of a store at revision rev.
func checkRecord(prev, r *record, rev int64) error {
	kv := &r.kv
	switch {
	case len(kv.Key) == 0:
		return fmt.Errorf("%w: empty key at revision %d", errCorrupt, kv.ModRevision)
	case kv.ModRevision < 1 || r.sub < 0 || prev != nil && !prev.before(r):
		return fmt.Errorf("%w: record (%d,%d) out of order", errCorrupt, kv.ModRevision, r.sub)
	case kv.ModRevision > rev:
		return fmt.Errorf("%w: record at revision %d beyond store revision %d", errCorrupt, kv.ModRevision, rev)
	case !r.tomb && (kv.CreateRevision < 1 || kv.CreateRevision > kv.ModRevision || kv.Version < 1):
		return fmt.Errorf("%w: record of %q at %d: create %d version %d", errCorrupt, bytes.Clone(kv.Key), kv.ModRevision, kv.CreateRevision, kv.Version)
	}
	return nil
}

// CompactRev is the revision of the last compaction before the snapshot, 0
// if none.
func (sn *Snapshot) CompactRev() int64 { return sn.compactRev }

// Len is the number of records the snapshot holds.
func (sn *Snapshot) Len() int { return len(sn.log) }

// Records yields every record in (revision, sub) order. Each is a copy;
// its byte slices are the store's and must not be changed.
func (sn *Snapshot) Records() iter.Seq[Record] {
	return func(yield func(Record) bool) {
		for _, r := range sn.log {
			if !yield(Record{KV: r.kv, Sub: r.sub, Tombstone: r.tomb}) {
				return
			}
		}
	}
}

// LiveKeys is the number of keys the snapshot's store holds at its
// revision: those whose newest record is not a deletion.
func (sn *Snapshot) LiveKeys() int {
	live := make(map[string]bool, len(sn.log))
	for _, r := range sn.log {
		live[string(r.kv.Key)] = !r.tomb
	}
	n := 0
	for _, l := range live {
		if l {
			n++
		}
	}
	return n
}

// Load replaces the whole state with sn's, as Restore does with a snapshot
// file (watchers resume the same way). sn stays usable: the store keeps
// copies of its records.
func (s *Store) Load(sn *Snapshot) {
	// One allocation per record, as Restore makes: a slab would be pinned
	// whole by the few records that outlive later compactions.
	log := make([]*record, len(sn.log))
	for i, r := range sn.log {
		c := *r
		log[i] = &c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	oldRev := s.rev
	s.reset(sn.rev, sn.compactRev, log)
	s.resumeWatchers(oldRev)
}

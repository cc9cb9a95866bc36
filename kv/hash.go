package kv

import (
	"hash/crc32"
	"slices"
)

// KVHash is what HashKV answers: a checksum of the key space at a revision.
type KVHash struct {
	// Hash is a CRC-32C over every record the store keeps at or below
	// Revision, in log order, each in its snapshot encoding: key, value,
	// create and mod revision, version, lease, and deletions.
	Hash uint32
	// Revision is the revision hashed; CompactRevision the store's
	// compaction point when it was hashed, -1 if it was never compacted
	// (etcd's answer).
	Revision, CompactRevision int64
}

// HashKV checksums the key space as of rev (0: the current revision), as
// etcd's HashKV does, so that members holding the same history at the same
// revision answer the same hash and a member whose data diverged stands
// out. Like etcd's, the hash covers the history kept since the last
// compaction, so members compare only at the same compact revision.
//
// It fails with ErrGRPCCompacted for a revision before the compaction
// point and ErrGRPCFutureRev for one not yet reached. The records are read
// after the lock is released (they are immutable), so a large store
// delays no write while it is hashed.
func (s *Store) HashKV(rev int64) (KVHash, error) {
	s.mu.RLock()
	for _, h := range s.compactionHashes {
		if h.Revision == rev {
			s.mu.RUnlock()
			return h, nil
		}
	}
	s.mu.RUnlock()
	sn := s.Snapshot()
	if rev == 0 {
		rev = sn.rev
	}
	if rev < sn.compactRev {
		return KVHash{}, ErrCompacted
	}
	if rev > sn.rev {
		return KVHash{}, ErrFutureRev
	}
	return hashRecords(sn.log[:countUpTo(sn.log, rev)], rev, sn.compactRev), nil
}

// hashRecords is the hash of records (the log up to rev) in a store
// compacted at compactRev.
func hashRecords(records []*record, rev, compactRev int64) KVHash {
	h := crc32.New(crcTable)
	var b []byte
	prev := int64(0)
	for _, r := range records {
		b = appendRecord(b[:0], r, prev)
		h.Write(b)
		prev = r.kv.ModRevision
	}
	if compactRev == 0 {
		compactRev = -1
	}
	return KVHash{Hash: h.Sum32(), Revision: rev, CompactRevision: compactRev}
}

// compactionHashesKept is how many compactions' hashes a store keeps, as
// etcd's hash storage.
const compactionHashesKept = 10

// keepCompactionHash records, before a compaction at rev drops history,
// the hash at rev of the history as it stands: etcd answers HashKV at a
// compaction's revision with that hash (it computes it while it
// compacts), so HashKV at that revision answers the same before and after
// the compaction. Like etcd's it lives in memory only: a member restarted
// since hashes what it holds, with the new compact revision, which the
// corruption check does not compare with the others'. Call with s.mu held.
func (s *Store) keepCompactionHash(split int, rev int64) {
	s.compactionHashes = append(s.compactionHashes, hashRecords(s.log[:split], rev, s.compactRev))
	if n := len(s.compactionHashes); n > compactionHashesKept {
		s.compactionHashes = slices.Delete(s.compactionHashes, 0, n-compactionHashesKept)
	}
}

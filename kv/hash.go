package kv

import (
	"hash/crc32"
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
	h := crc32.New(crcTable)
	var b []byte
	prev := int64(0)
	for _, r := range sn.log[:countUpTo(sn.log, rev)] {
		b = appendRecord(b[:0], r, prev)
		h.Write(b)
		prev = r.kv.ModRevision
	}
	compacted := sn.compactRev
	if compacted == 0 {
		compacted = -1
	}
	return KVHash{Hash: h.Sum32(), Revision: rev, CompactRevision: compacted}, nil
}

package kv

import (
	"bytes"
	"errors"
	"testing"
)

func hashKV(t *testing.T, s *Store, rev int64) KVHash {
	t.Helper()
	h, err := s.HashKV(rev)
	if err != nil {
		t.Fatalf("HashKV(%d): %v", rev, err)
	}
	return h
}

func TestHashKV(t *testing.T) {
	a, b := newStore(), newStore()
	for _, s := range []*Store{a, b} {
		put(t, s, "k1", "v1")
		put(t, s, "k2", "v2")
		del(t, s, "k1", "")
	}
	at3 := hashKV(t, a, 3)
	if at3 != hashKV(t, b, 3) || hashKV(t, a, 0) != hashKV(t, b, 0) {
		t.Fatal("stores with the same history hash differently")
	}
	if cur := hashKV(t, a, 0); cur.Revision != 4 || cur.CompactRevision != -1 || cur == at3 {
		t.Fatalf("current hash %+v, want revision 4, compact revision -1 and a hash other than revision 3's", cur)
	}

	// Later writes leave the hash of an earlier revision as it was.
	put(t, a, "k3", "v3")
	if hashKV(t, a, 3) != at3 {
		t.Fatal("a later write changed the hash at revision 3")
	}
	if _, err := a.HashKV(6); !errors.Is(err, ErrFutureRev) {
		t.Fatalf("HashKV past the store's revision: %v", err)
	}

	// One member whose value differs at the same revision stands out.
	c := newStore()
	put(t, c, "k1", "v1")
	put(t, c, "k2", "v2-diverged")
	del(t, c, "k1", "")
	if hashKV(t, c, 3) == at3 {
		t.Fatal("a different value at the same revision hashed the same")
	}

	// Compaction: earlier revisions are gone, the compact point is reported,
	// and two stores compacted alike agree again.
	put(t, b, "k3", "v3")
	for _, s := range []*Store{a, b} {
		if _, err := s.Compact(4); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.HashKV(3); !errors.Is(err, ErrCompacted) {
		t.Fatalf("HashKV before the compaction point: %v", err)
	}
	ha := hashKV(t, a, 0)
	if ha.CompactRevision != 4 || ha != hashKV(t, b, 0) {
		t.Fatalf("after compaction: %+v vs %+v", ha, hashKV(t, b, 0))
	}

	// A store restored from a snapshot hashes as its source.
	var buf bytes.Buffer
	if _, err := a.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r := newStore()
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if hashKV(t, r, 0) != ha {
		t.Fatal("a restored store hashes differently from its source")
	}
}

// TestSizeFollowsHistory: Size counts every kept revision and gives back
// what a compaction drops; a restored store counts the same.
func TestSizeFollowsHistory(t *testing.T) {
	s := newStore()
	if s.Size() != 0 {
		t.Fatalf("empty store size %d", s.Size())
	}
	put(t, s, "k", "12345")      // rev 2
	put(t, s, "k", "1234567890") // rev 3
	del(t, s, "k", "")           // rev 4, a tombstone
	put(t, s, "other", "v")      // rev 5
	want := int64(1+5+1+10+1+0+5+1) + 4*recordOverhead
	if s.Size() != want {
		t.Fatalf("size %d, want %d", s.Size(), want)
	}
	if _, err := s.Compact(4); err != nil {
		t.Fatal(err)
	}
	// k's history and its tombstone are gone; other stays.
	if want := int64(5+1) + recordOverhead; s.Size() != want {
		t.Fatalf("size after compaction %d, want %d", s.Size(), want)
	}
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r := newStore()
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if r.Size() != s.Size() {
		t.Fatalf("restored size %d, want %d", r.Size(), s.Size())
	}
}

// TestHashKVAtACompactionRevision: HashKV at the revision a compaction ran
// at answers the same before and after it, as etcd's (its suite's
// TestVerifyHashKVAfterCompactAndDefrag): the hash of the history as it
// stood, with the compact revision before it. A store restored since
// knows no such hash and answers what it holds, with the new compact
// revision, which members do not compare with the old one.
func TestHashKVAtACompactionRevision(t *testing.T) {
	s := newStore()
	put(t, s, "k", "1")
	put(t, s, "k", "2")
	del(t, s, "k", "")
	put(t, s, "k", "3")
	before := hashKV(t, s, 3)
	if _, err := s.Compact(3); err != nil {
		t.Fatal(err)
	}
	if after := hashKV(t, s, 3); after != before || after.CompactRevision != -1 {
		t.Fatalf("HashKV at the compaction revision: %+v after, %+v before", after, before)
	}
	if cur := hashKV(t, s, 0); cur.CompactRevision != 3 {
		t.Fatalf("HashKV at the current revision after the compaction: %+v", cur)
	}
	r := newStore()
	snapshotInto(t, s, r)
	if got := hashKV(t, r, 3); got.CompactRevision != 3 {
		t.Fatalf("a restored store at the compaction revision: %+v", got)
	}
}

package kv

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestRecordsRoundTrip: the records a snapshot yields build, with
// NewSnapshot, a snapshot that Load turns into the same store, and that
// writes the same bytes.
func TestRecordsRoundTrip(t *testing.T) {
	s := newStore(1, 2)
	randomHistory(t, s, 4, 400)
	sn := s.Snapshot()
	built, err := NewSnapshot(sn.Rev(), sn.CompactRev(), slices.Collect(sn.Records()))
	if err != nil {
		t.Fatal(err)
	}
	if built.Len() != sn.Len() || built.Len() == 0 {
		t.Fatalf("%d records, want %d", built.Len(), sn.Len())
	}
	r := newStore(1, 2)
	put(t, r, "stale", "x")
	r.Load(built)
	if got, want := rangesAt(t, r, s.CompactRev(), s.Rev()), rangesAt(t, s, s.CompactRev(), s.Rev()); !slices.Equal(got, want) {
		t.Errorf("loaded store:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if leaseState(r) != leaseState(s) || r.KeyCount() != s.KeyCount() || r.Size() != s.Size() {
		t.Errorf("loaded store: leases %s keys %d size %d, want %s %d %d", leaseState(r), r.KeyCount(), r.Size(), leaseState(s), s.KeyCount(), s.Size())
	}
	var a, b bytes.Buffer
	if _, err := sn.WriteTo(&a); err != nil {
		t.Fatal(err)
	}
	if _, err := built.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("a snapshot rebuilt from its records writes other bytes")
	}
}

// TestNewSnapshotRefusesImpossibleHistory: NewSnapshot checks what Restore
// checks of a file.
func TestNewSnapshotRefusesImpossibleHistory(t *testing.T) {
	kv := func(key string, create, mod, version int64) mvccpb.KeyValue {
		return mvccpb.KeyValue{Key: []byte(key), CreateRevision: create, ModRevision: mod, Version: version}
	}
	good := Record{KV: kv("a", 2, 2, 1)}
	for name, tc := range map[string]struct {
		rev, compact int64
		recs         []Record
	}{
		"revision 0":            {0, 0, nil},
		"compacted in future":   {3, 4, nil},
		"beyond the revision":   {2, 0, []Record{good, {KV: kv("b", 3, 3, 1)}}},
		"out of order":          {5, 0, []Record{{KV: kv("b", 3, 3, 1)}, good}},
		"same revision and sub": {5, 0, []Record{good, {KV: kv("b", 2, 2, 1)}}},
		"empty key":             {5, 0, []Record{{KV: kv("", 2, 2, 1)}}},
		"created after change":  {5, 0, []Record{{KV: kv("a", 3, 2, 1)}}},
		"version 0":             {5, 0, []Record{{KV: kv("a", 2, 2, 0)}}},
	} {
		if _, err := NewSnapshot(tc.rev, tc.compact, tc.recs); err == nil {
			t.Errorf("%s: built", name)
		}
	}
	sn, err := NewSnapshot(5, 1, []Record{good, {KV: kv("b", 2, 2, 1), Sub: 1}, {KV: mvccpb.KeyValue{Key: []byte("a"), ModRevision: 4}, Tombstone: true}})
	if err != nil || sn.Rev() != 5 || sn.CompactRev() != 1 || sn.Len() != 3 {
		t.Fatalf("a possible history: %v", err)
	}
}

package integrity

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/kv"
)

func TestJudge(t *testing.T) {
	h := func(sum uint32) view { return view{hash: sum} }
	cases := []struct {
		name    string
		hashes  map[uint64]view
		voters  int
		corrupt []uint64
		ok      bool
	}{
		{"all agree", map[uint64]view{1: h(5), 2: h(5), 3: h(5)}, 3, nil, true},
		{"one follower differs", map[uint64]view{1: h(5), 2: h(6), 3: h(5)}, 3, []uint64{2}, true},
		{"the leader differs", map[uint64]view{1: h(7), 2: h(5), 3: h(5)}, 3, []uint64{1}, true},
		{"two of three answered and agree", map[uint64]view{1: h(5), 3: h(5)}, 3, nil, true},
		{"two of three answered and disagree", map[uint64]view{1: h(5), 3: h(6)}, 3, nil, false},
		{"all three differ", map[uint64]view{1: h(5), 2: h(6), 3: h(7)}, 3, nil, false},
		{"five members, two differ", map[uint64]view{1: h(5), 2: h(5), 3: h(6), 4: h(5), 5: h(7)}, 5, []uint64{3, 5}, true},
		{"five members, a majority is not answering", map[uint64]view{1: h(5), 2: h(5)}, 5, nil, false},
	}
	for _, tc := range cases {
		_, corrupt, ok := Judge(tc.hashes, tc.voters)
		if ok != tc.ok || !slices.Equal(corrupt, tc.corrupt) {
			t.Errorf("%s: Judge = %v, %v; want %v, %v", tc.name, corrupt, ok, tc.corrupt, tc.ok)
		}
	}
}

// fakeCluster serves hashes from real stores, one per member.
type fakeCluster struct {
	self    uint64
	stores  map[uint64]*kv.Store
	down    map[uint64]bool
	corrupt []uint64
	// applied is each member's applied index; unset, its revision (as if
	// every entry made one).
	applied map[uint64]uint64
}

func (f *fakeCluster) appliedOf(id uint64) uint64 {
	if i, ok := f.applied[id]; ok {
		return i
	}
	return uint64(f.stores[id].Rev())
}

func (f *fakeCluster) Applied() uint64 { return f.appliedOf(f.self) }
func (f *fakeCluster) PeerApplied(_ context.Context, id uint64) (uint64, int64, error) {
	if f.down[id] {
		return 0, 0, context.DeadlineExceeded
	}
	return f.appliedOf(id), f.stores[id].Rev(), nil
}

func (f *fakeCluster) Self() uint64 { return f.self }
func (f *fakeCluster) Voters() ([]uint64, error) {
	var ids []uint64
	for id := range f.stores {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}
func (f *fakeCluster) LocalHash(rev int64) (kv.KVHash, error) { return f.stores[f.self].HashKV(rev) }
func (f *fakeCluster) PeerHash(_ context.Context, id uint64, rev int64) (kv.KVHash, error) {
	if f.down[id] {
		return kv.KVHash{}, context.DeadlineExceeded
	}
	return f.stores[id].HashKV(rev)
}
func (f *fakeCluster) Corrupt(id uint64) bool { return slices.Contains(f.corrupt, id) }
func (f *fakeCluster) RaiseCorrupt(_ context.Context, id uint64) error {
	f.corrupt = append(f.corrupt, id)
	return nil
}

func put(t *testing.T, s *kv.Store, k, v string) {
	t.Helper()
	if _, err := s.Put(putRequest(k, v)); err != nil {
		t.Fatal(err)
	}
}

func TestCheckNamesTheDivergedMember(t *testing.T) {
	f := &fakeCluster{self: 1, stores: map[uint64]*kv.Store{}, down: map[uint64]bool{}}
	for id := uint64(1); id <= 3; id++ {
		f.stores[id] = kv.NewStore(kv.Options{})
		put(t, f.stores[id], "a", "1")
	}
	k := New(f, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	check := func() []uint64 {
		t.Helper()
		named, err := k.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return named
	}
	if named := check(); named != nil {
		t.Fatalf("first round named %v; it only records the revision", named)
	}
	// Member 3 applies a different value at the same revision.
	put(t, f.stores[1], "b", "2")
	put(t, f.stores[2], "b", "2")
	put(t, f.stores[3], "b", "2-diverged")
	if named := check(); named != nil {
		t.Fatalf("round at the revision before the divergence named %v", named)
	}
	// A member still behind the compared revision is left out, not named.
	put(t, f.stores[1], "c", "3")
	put(t, f.stores[2], "c", "3")
	if named := check(); !slices.Equal(named, []uint64{3}) {
		t.Fatalf("named %v, want member 3", named)
	}
	if named := check(); named != nil || !slices.Equal(f.corrupt, []uint64{3}) {
		t.Fatalf("a named member was named again: %v, alarms %v", named, f.corrupt)
	}
}

func TestCheckWithoutMajorityNamesNobody(t *testing.T) {
	f := &fakeCluster{self: 1, stores: map[uint64]*kv.Store{}, down: map[uint64]bool{2: true}}
	for id := uint64(1); id <= 3; id++ {
		f.stores[id] = kv.NewStore(kv.Options{})
	}
	put(t, f.stores[1], "a", "1")
	put(t, f.stores[2], "a", "1")
	put(t, f.stores[3], "a", "other")
	k := New(f, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for range 2 {
		if named, err := k.Check(context.Background()); err != nil || named != nil {
			t.Fatalf("named %v (%v) with the deciding member down", named, err)
		}
	}
}

func TestCheckSkipsACompactedRevision(t *testing.T) {
	f := &fakeCluster{self: 1, stores: map[uint64]*kv.Store{1: kv.NewStore(kv.Options{}), 2: kv.NewStore(kv.Options{})}}
	put(t, f.stores[1], "a", "1")
	put(t, f.stores[2], "a", "1")
	k := New(f, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	k.Check(context.Background())
	for _, s := range f.stores {
		put(t, s, "a", "2")
		if _, err := s.Compact(s.Rev()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.stores[1].HashKV(2); !errors.Is(err, kv.ErrCompacted) {
		t.Fatalf("setup: revision 2 not compacted: %v", err)
	}
	if named, err := k.Check(context.Background()); err != nil || named != nil {
		t.Fatalf("round over a compacted revision: %v %v", named, err)
	}
}

func putRequest(k, v string) *pb.PutRequest { return &pb.PutRequest{Key: []byte(k), Value: []byte(v)} }

// TestCheckNamesAMemberShortOfTheRevision: a member that applied as many
// entries as the leader had when it recorded the revision, and holds fewer
// revisions, applied another history; it used to answer "future revision"
// round after round and never be compared. A member merely behind is
// still left out.
func TestCheckNamesAMemberShortOfTheRevision(t *testing.T) {
	f := &fakeCluster{self: 1, stores: map[uint64]*kv.Store{}, down: map[uint64]bool{}, applied: map[uint64]uint64{}}
	for id := uint64(1); id <= 3; id++ {
		f.stores[id] = kv.NewStore(kv.Options{})
	}
	for _, k := range []string{"a", "b", "c"} {
		put(t, f.stores[1], k, "1")
		put(t, f.stores[3], k, "1")
	}
	put(t, f.stores[2], "other", "1") // its history made one revision of three entries
	f.applied = map[uint64]uint64{1: 10, 2: 10, 3: 10}
	k := New(f, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if named, err := k.Check(context.Background()); err != nil || named != nil {
		t.Fatalf("first round: %v %v", named, err)
	}
	f.applied[2] = 9 // behind: not judged
	if named, err := k.Check(context.Background()); err != nil || named != nil {
		t.Fatalf("a member behind was named: %v %v", named, err)
	}
	f.applied[2] = 12
	if named, err := k.Check(context.Background()); err != nil || !slices.Equal(named, []uint64{2}) {
		t.Fatalf("named %v (%v), want member 2, short of the revision at the same index", named, err)
	}
}

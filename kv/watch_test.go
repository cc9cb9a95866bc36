package kv

import (
	"errors"
	"slices"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

func revRange(from, to int64) []int64 {
	var out []int64
	for r := from; r <= to; r++ {
		out = append(out, r)
	}
	return out
}

func TestWatchHistoryThenLive(t *testing.T) {
	s := newStore()
	for i := 0; i < 5; i++ {
		put(t, s, "k", string(rune('a'+i))) // revs 2..6
	}
	sink := newSink()
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte("k"), StartRev: 3, Sink: sink}); err != nil {
		t.Fatal(err)
	}
	if err := s.Watch(WatchRequest{ID: 2, Key: []byte("k"), Sink: sink}); err != nil { // from now on
		t.Fatal(err)
	}
	if err := s.Watch(WatchRequest{ID: 3, Key: []byte("k"), StartRev: 8, Sink: sink}); err != nil { // future
		t.Fatal(err)
	}
	put(t, s, "k", "f") // 7
	put(t, s, "k", "g") // 8
	if got := sink.revs(1); !slices.Equal(got, revRange(3, 8)) {
		t.Errorf("watcher 1 revs %v", got)
	}
	if got := sink.revs(2); !slices.Equal(got, revRange(7, 8)) {
		t.Errorf("watcher 2 revs %v", got)
	}
	if got := sink.revs(3); !slices.Equal(got, []int64{8}) {
		t.Errorf("watcher 3 revs %v", got)
	}
	if d := sink.got[0]; d.evs != "PUT k@2/3/2=b" {
		t.Errorf("first event %s", d.evs)
	}
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte("k"), Sink: sink}); err == nil {
		t.Error("duplicate watch id accepted")
	}
	if err := s.Watch(WatchRequest{ID: 9, Key: []byte("k")}); err == nil {
		t.Error("nil sink accepted")
	}
}

// TestWatchConcurrentRegistration registers a watcher from history while
// another goroutine writes: it must see every revision exactly once.
func TestWatchConcurrentRegistration(t *testing.T) {
	s := newStore()
	const n = 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			if _, err := s.Put(&pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	sinks := make([]*testSink, 20)
	for i := range sinks {
		sinks[i] = newSink()
		if err := s.Watch(WatchRequest{ID: 1, Key: []byte("k"), StartRev: 2, Sink: sinks[i]}); err != nil {
			t.Error(err)
		}
		_ = s.Rev()
		_ = get(t, s, "k")
	}
	wg.Wait()
	for i, k := range sinks {
		if got := k.revs(1); !slices.Equal(got, revRange(2, n+1)) {
			t.Errorf("sink %d: %d deliveries, first %v", i, len(got), got[:min(len(got), 5)])
		}
	}
}

func TestWatchMatchingAndFilters(t *testing.T) {
	s := newStore()
	sink := newSink()
	reqs := []WatchRequest{
		{ID: 1, Key: []byte("foo")},
		{ID: 2, Key: []byte("foo"), RangeEnd: []byte("fop")},
		{ID: 3, Key: []byte("g"), RangeEnd: []byte{0}},
		{ID: 4, Key: []byte{0}, RangeEnd: []byte{0}, NoPut: true},
		{ID: 5, Key: []byte{0}, RangeEnd: []byte{0}, NoDelete: true},
		{ID: 6, RangeEnd: []byte{0}}, // empty key means "\x00"
	}
	for _, r := range reqs {
		r.Sink = sink
		if err := s.Watch(r); err != nil {
			t.Fatal(err)
		}
	}
	put(t, s, "foo", "1")                                                                                                           // 2
	put(t, s, "foo1", "1")                                                                                                          // 3
	put(t, s, "h", "1")                                                                                                             // 4
	del(t, s, "foo", "")                                                                                                            // 5
	if _, err := s.Txn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "1"), opDel("h", ""), opPut("fooz", "1")}}); err != nil { // 6
		t.Fatal(err)
	}
	want := map[WatchID][]int64{
		1: {2, 5},
		2: {2, 3, 5, 6},
		3: {4, 6},
		4: {5, 6},
		5: {2, 3, 4, 6},
		6: {2, 3, 4, 5, 6},
	}
	for id, revs := range want {
		if got := sink.revs(id); !slices.Equal(got, revs) {
			t.Errorf("watcher %d revs %v, want %v", id, got, revs)
		}
	}
	byID := func(id WatchID, rev int64) string {
		for _, d := range sink.got {
			if d.id == id && d.rev == rev {
				return d.evs
			}
		}
		return ""
	}
	checks := []struct {
		id   WatchID
		rev  int64
		want string
	}{
		{2, 6, "PUT fooz@6/6/1=1"},
		{4, 6, "DELETE h@0/6/0="},
		{5, 6, "PUT a@6/6/1=1; PUT fooz@6/6/1=1"},
		{6, 6, "PUT a@6/6/1=1; DELETE h@0/6/0=; PUT fooz@6/6/1=1"},
		{1, 5, "DELETE foo@0/5/0="},
	}
	for _, c := range checks {
		if got := byID(c.id, c.rev); got != c.want {
			t.Errorf("watcher %d rev %d: %s, want %s", c.id, c.rev, got, c.want)
		}
	}
}

func TestWatchPrevKV(t *testing.T) {
	s := newStore()
	put(t, s, "k", "1") // 2
	put(t, s, "k", "2") // 3
	del(t, s, "k", "")  // 4
	put(t, s, "k", "3") // 5
	want := []string{
		"PUT k@2/2/1=1",
		"PUT k@2/3/2=2 prev k@2/2/1=1",
		"DELETE k@0/4/0= prev k@2/3/2=2",
		"PUT k@5/5/1=3",
		"PUT k@5/6/2=4 prev k@5/5/1=3",
		"DELETE k@0/7/0= prev k@5/6/2=4",
	}
	hist, live := newSink(), newSink()
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte("k"), StartRev: 2, PrevKV: true, Sink: hist}); err != nil {
		t.Fatal(err)
	}
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte("k"), PrevKV: true, Sink: live}); err != nil {
		t.Fatal(err)
	}
	plain := newSink()
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte("k"), Sink: plain}); err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "4") // 6
	del(t, s, "k", "")  // 7
	var got []string
	for _, d := range hist.got {
		got = append(got, d.evs)
	}
	if !slices.Equal(got, want) {
		t.Errorf("history+live:\n%q\nwant\n%q", got, want)
	}
	got = got[:0]
	for _, d := range live.got {
		got = append(got, d.evs)
	}
	if !slices.Equal(got, want[4:]) {
		t.Errorf("live: %q", got)
	}
	if plain.got[0].evs != "PUT k@5/6/2=4" {
		t.Errorf("prev kv without asking: %s", plain.got[0].evs)
	}

	// After compaction the previous version may be gone from history.
	if _, err := s.Compact(7); err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "5") // 8
	if d := live.got[len(live.got)-1]; d.evs != "PUT k@8/8/1=5" {
		t.Errorf("after compaction: %s", d.evs)
	}
}

// sharingSink checks that watchers of one key share events.
type sharingSink struct{ evs [][]*mvccpb.Event }

func (k *sharingSink) Deliver(_ WatchID, _ int64, evs []*mvccpb.Event) bool {
	k.evs = append(k.evs, evs)
	return true
}

func TestWatchFanoutSharesEvents(t *testing.T) {
	s := newStore()
	k := &sharingSink{}
	for id := WatchID(1); id <= 3; id++ {
		if err := s.Watch(WatchRequest{ID: id, Key: []byte("k"), Sink: k}); err != nil {
			t.Fatal(err)
		}
	}
	put(t, s, "k", "v")
	if len(k.evs) != 3 || k.evs[0][0] != k.evs[1][0] || k.evs[1][0] != k.evs[2][0] {
		t.Fatalf("deliveries %v", k.evs)
	}
	if cap(k.evs[0]) != 1 {
		t.Errorf("delivered slice has spare capacity %d: an append by the sink could clobber a neighbour", cap(k.evs[0]))
	}
}

func TestWatchUnsyncedResync(t *testing.T) {
	s := newStore()
	sink := newSink()
	sink.capacity = 2
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte("k"), Sink: sink}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		put(t, s, "k", "v") // 2..6; 4 is refused
	}
	if got := sink.revs(1); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("before resync %v", got)
	}
	s.Progress(sink) // unsynced: skipped
	if len(sink.got) != 2 {
		t.Fatalf("progress reached an unsynced watcher")
	}
	sink.capacity = 3
	if err := s.Resync(sink, 1); err != nil {
		t.Fatal(err)
	}
	if got := sink.revs(1); !slices.Equal(got, []int64{2, 3, 4}) {
		t.Fatalf("partial resync %v", got)
	}
	put(t, s, "k", "v") // 7: still unsynced, not delivered
	sink.capacity = -1
	if err := s.Resync(sink, 1); err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "v") // 8: live again
	if got := sink.revs(1); !slices.Equal(got, revRange(2, 8)) {
		t.Fatalf("after resync %v", got)
	}
	if err := s.Resync(sink, 1); err != nil { // synced: no-op
		t.Fatal(err)
	}
	if len(sink.got) != 7 {
		t.Errorf("resync of a synced watcher delivered")
	}
	wantErr(t, s.Resync(sink, 42), ErrWatchNotFound)
}

func TestWatchRefusedDuringCatchUp(t *testing.T) {
	s := newStore()
	for i := 0; i < 4; i++ {
		put(t, s, "k", "v") // 2..5
	}
	sink := newSink()
	sink.capacity = 1
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte("k"), StartRev: 2, Sink: sink}); err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "v") // 6
	if got := sink.revs(1); !slices.Equal(got, []int64{2}) {
		t.Fatalf("got %v", got)
	}
	sink.capacity = -1
	if err := s.Resync(sink, 1); err != nil {
		t.Fatal(err)
	}
	if got := sink.revs(1); !slices.Equal(got, revRange(2, 6)) {
		t.Fatalf("got %v", got)
	}
}

func TestWatchCompacted(t *testing.T) {
	s := newStore()
	for i := 0; i < 5; i++ {
		put(t, s, "k", "v") // 2..6
	}
	sink := newSink()
	sink.capacity = 0
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte("k"), Sink: sink}); err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "v") // 7, refused: unsynced at 7
	if _, err := s.Compact(4); err != nil {
		t.Fatal(err)
	}
	for _, start := range []int64{1, 3, 4} {
		wantErr(t, s.Watch(WatchRequest{ID: 2, Key: []byte("k"), StartRev: start, Sink: sink}), ErrCompacted)
	}
	if s.watch.get(sink, 2) != nil {
		t.Fatal("compacted watch was registered")
	}
	other := newSink()
	if err := s.Watch(WatchRequest{ID: 2, Key: []byte("k"), StartRev: 5, Sink: other}); err != nil {
		t.Fatal(err)
	}
	if got := other.revs(2); !slices.Equal(got, revRange(5, 7)) {
		t.Errorf("from compact+1: %v", got)
	}
	if _, err := s.Compact(7); err != nil {
		t.Fatal(err)
	}
	sink.capacity = -1
	wantErr(t, s.Resync(sink, 1), ErrCompacted)
	wantErr(t, s.Resync(sink, 1), ErrWatchNotFound)
}

func TestWatchProgressAndCancel(t *testing.T) {
	s := newStore()
	sink := newSink()
	other := newSink()
	for _, id := range []WatchID{3, 1, 2} {
		if err := s.Watch(WatchRequest{ID: id, Key: []byte("k"), Sink: sink}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte("k"), Sink: other}); err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "v") // 2
	s.Progress(sink)
	got := sink.take()
	want := []delivery{
		{id: 3, rev: 2, n: 1, evs: "PUT k@2/2/1=v"},
		{id: 1, rev: 2, n: 1, evs: "PUT k@2/2/1=v"},
		{id: 2, rev: 2, n: 1, evs: "PUT k@2/2/1=v"},
		{id: 1, rev: 2},
		{id: 2, rev: 2},
		{id: 3, rev: 2},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if len(other.got) != 1 {
		t.Errorf("progress leaked to another sink: %+v", other.got)
	}
	s.CancelWatch(sink, 1)
	s.CancelWatch(sink, 99)
	put(t, s, "k", "v") // 3
	if got := sink.take(); len(got) != 2 || got[0].id != 3 || got[1].id != 2 {
		t.Errorf("after cancel %+v", got)
	}
	// A refused progress notice unsyncs the watcher from the next revision.
	sink.capacity = 0
	s.Progress(sink)
	sink.capacity = -1
	put(t, s, "k", "v") // 4
	if len(sink.got) != 0 {
		t.Fatalf("delivered to unsynced watchers: %+v", sink.got)
	}
	if err := s.Resync(sink, 2); err != nil {
		t.Fatal(err)
	}
	if got := sink.take(); len(got) != 1 || got[0].rev != 4 {
		t.Errorf("resync after progress %+v", got)
	}
}

func TestWatchRestore(t *testing.T) {
	// Two members with the same history; the follower restores the leader's
	// later snapshot while it has watchers.
	leader, follower := newStore(), newStore()
	for _, s := range []*Store{leader, follower} {
		put(t, s, "k", "1") // 2
		put(t, s, "k", "2") // 3
	}
	sink := newSink()
	if err := follower.Watch(WatchRequest{ID: 1, Key: []byte("k"), Sink: sink}); err != nil {
		t.Fatal(err)
	}
	if err := follower.Watch(WatchRequest{ID: 2, Key: []byte("j"), Sink: sink}); err != nil {
		t.Fatal(err)
	}
	plain := plainSink{newSink()}
	if err := follower.Watch(WatchRequest{ID: 1, Key: []byte("k"), Sink: plain}); err != nil {
		t.Fatal(err)
	}
	put(t, leader, "k", "3") // 4
	put(t, leader, "j", "1") // 5
	put(t, leader, "k", "4") // 6
	snapshotInto(t, leader, follower)
	if got := sink.revs(1); !slices.Equal(got, []int64{4, 6}) {
		t.Errorf("watcher 1 after restore %v", got)
	}
	if got := sink.revs(2); !slices.Equal(got, []int64{5}) {
		t.Errorf("watcher 2 after restore %v", got)
	}
	put(t, follower, "k", "5") // 7
	if got := sink.revs(1); !slices.Equal(got, []int64{4, 6, 7}) {
		t.Errorf("watcher 1 live after restore %v", got)
	}

	// History the watcher needs is compacted away in the snapshot.
	put(t, leader, "k", "5") // 7
	put(t, leader, "k", "6") // 8
	if _, err := leader.Compact(8); err != nil {
		t.Fatal(err)
	}
	snapshotInto(t, leader, follower)
	if rev, ok := sink.canceled[1]; !ok || rev != 8 {
		t.Errorf("canceled = %v", sink.canceled)
	}
	if follower.watch.count != 1 {
		t.Errorf("%d watchers left, want the plain sink's", follower.watch.count)
	}
	// A sink without Canceled learns about it from Resync.
	wantErr(t, follower.Resync(plain, 1), ErrCompacted)
	if follower.watch.count != 0 {
		t.Errorf("%d watchers left", follower.watch.count)
	}
}

// plainSink is a Sink that does not implement CanceledSink.
type plainSink struct{ k *testSink }

func (p plainSink) Deliver(id WatchID, rev int64, evs []*mvccpb.Event) bool {
	return p.k.Deliver(id, rev, evs)
}

func TestValidateWatch(t *testing.T) {
	cases := []struct {
		key, end string
		rev      int64
		want     error
	}{
		{"a", "", 0, nil},
		{"", "", 0, nil},      // the smallest key, "\x00"
		{"", "\x00", 0, nil},  // every key
		{"b", "\x00", 0, nil}, // from b on
		{"a", "b", 5, nil},    // [a, b)
		{"\x00", "\x01", 0, nil},
		{"b", "a", 0, ErrEmptyWatcherRange},
		{"b", "b", 0, ErrEmptyWatcherRange},
		{"", "\x00\x00", 0, nil},
		{"a", "", -1, ErrCompacted},
	}
	for _, tc := range cases {
		if got := ValidateWatch([]byte(tc.key), []byte(tc.end), tc.rev); !errors.Is(got, tc.want) {
			t.Errorf("ValidateWatch(%q, %q, %d) = %v, want %v", tc.key, tc.end, tc.rev, got, tc.want)
		}
	}
	s := newStore()
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte("b"), RangeEnd: []byte("a"), Sink: &testSink{}}); !errors.Is(err, ErrEmptyWatcherRange) {
		t.Fatalf("Store.Watch of an empty range: %v", err)
	}
}

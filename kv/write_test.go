package kv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestEmptyStore(t *testing.T) {
	s := newStore()
	if s.Rev() != 1 || s.CompactRev() != 0 || s.KeyCount() != 0 {
		t.Fatalf("rev %d compact %d keys %d", s.Rev(), s.CompactRev(), s.KeyCount())
	}
	if resp := put(t, s, "k", "v"); resp.Header.Revision != 2 {
		t.Fatalf("first put at %d, want 2", resp.Header.Revision)
	}
}

func TestPut(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, s *Store)
		req   *pb.PutRequest
		err   error
		want  string // the key after the put
		prev  string // PrevKv in the response
	}{
		{
			name: "create",
			req:  &pb.PutRequest{Key: []byte("k"), Value: []byte("v")},
			want: "k@2/2/1=v", prev: "<nil>",
		},
		{
			name:  "update",
			setup: func(t *testing.T, s *Store) { put(t, s, "k", "v1") },
			req:   &pb.PutRequest{Key: []byte("k"), Value: []byte("v2"), PrevKv: true},
			want:  "k@2/3/2=v2", prev: "k@2/2/1=v1",
		},
		{
			name:  "prev kv of missing key",
			setup: func(t *testing.T, s *Store) { put(t, s, "other", "x") },
			req:   &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), PrevKv: true},
			want:  "k@3/3/1=v", prev: "<nil>",
		},
		{
			name:  "recreate after delete",
			setup: func(t *testing.T, s *Store) { put(t, s, "k", "v1"); put(t, s, "k", "v2"); del(t, s, "k", "") },
			req:   &pb.PutRequest{Key: []byte("k"), Value: []byte("v3"), PrevKv: true},
			want:  "k@5/5/1=v3", prev: "<nil>",
		},
		{
			name:  "with lease",
			setup: func(t *testing.T, s *Store) { put(t, s, "k", "v1") },
			req:   &pb.PutRequest{Key: []byte("k"), Value: []byte("v2"), Lease: 7},
			want:  "k@2/3/2=v2#7", prev: "<nil>",
		},
		{
			name:  "ignore value",
			setup: func(t *testing.T, s *Store) { putLease(t, s, "k", "old", 7) },
			req:   &pb.PutRequest{Key: []byte("k"), IgnoreValue: true, Lease: 8},
			want:  "k@2/3/2=old#8", prev: "<nil>",
		},
		{
			name:  "ignore lease",
			setup: func(t *testing.T, s *Store) { putLease(t, s, "k", "old", 7) },
			req:   &pb.PutRequest{Key: []byte("k"), Value: []byte("new"), IgnoreLease: true, PrevKv: true},
			want:  "k@2/3/2=new#7", prev: "k@2/2/1=old#7",
		},
		{
			name:  "ignore both",
			setup: func(t *testing.T, s *Store) { putLease(t, s, "k", "old", 7) },
			req:   &pb.PutRequest{Key: []byte("k"), IgnoreValue: true, IgnoreLease: true},
			want:  "k@2/3/2=old#7", prev: "<nil>",
		},
		{name: "empty key", req: &pb.PutRequest{Value: []byte("v")}, err: ErrEmptyKey},
		{name: "nil request", req: nil, err: ErrEmptyKey},
		{
			name:  "value provided",
			setup: func(t *testing.T, s *Store) { put(t, s, "k", "v") },
			req:   &pb.PutRequest{Key: []byte("k"), Value: []byte("x"), IgnoreValue: true},
			err:   ErrValueProvided, want: "k@2/2/1=v",
		},
		{
			name:  "lease provided",
			setup: func(t *testing.T, s *Store) { put(t, s, "k", "v") },
			req:   &pb.PutRequest{Key: []byte("k"), Lease: 7, IgnoreLease: true},
			err:   ErrLeaseProvided, want: "k@2/2/1=v",
		},
		{name: "ignore value missing", req: &pb.PutRequest{Key: []byte("k"), IgnoreValue: true}, err: ErrKeyNotFound},
		{name: "ignore lease missing", req: &pb.PutRequest{Key: []byte("k"), IgnoreLease: true}, err: ErrKeyNotFound},
		{
			name:  "ignore value deleted",
			setup: func(t *testing.T, s *Store) { put(t, s, "k", "v"); del(t, s, "k", "") },
			req:   &pb.PutRequest{Key: []byte("k"), IgnoreValue: true},
			err:   ErrKeyNotFound,
		},
		{
			name:  "lease not found",
			setup: func(t *testing.T, s *Store) { put(t, s, "k", "v") },
			req:   &pb.PutRequest{Key: []byte("k"), Value: []byte("x"), Lease: 99},
			err:   ErrLeaseNotFound, want: "k@2/2/1=v",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(7, 8)
			if tt.setup != nil {
				tt.setup(t, s)
			}
			rev := s.Rev()
			resp, err := s.Put(tt.req)
			if tt.err != nil {
				wantErr(t, err, tt.err)
				if s.Rev() != rev {
					t.Errorf("failed put moved rev %d -> %d", rev, s.Rev())
				}
				if tt.want != "" {
					if got := fmtKV(get(t, s, "k")); got != tt.want {
						t.Errorf("after failed put: %s, want %s", got, tt.want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Header.Revision != rev+1 || s.Rev() != rev+1 {
				t.Errorf("revision %d (store %d), want %d", resp.Header.Revision, s.Rev(), rev+1)
			}
			if got := fmtKV(get(t, s, "k")); got != tt.want {
				t.Errorf("key = %s, want %s", got, tt.want)
			}
			if got := fmtKV(resp.PrevKv); got != tt.prev {
				t.Errorf("prev = %s, want %s", got, tt.prev)
			}
		})
	}
}

func TestPutCopiesInput(t *testing.T) {
	s := newStore()
	key, val := []byte("k"), []byte("v1")
	if _, err := s.Put(&pb.PutRequest{Key: key, Value: val}); err != nil {
		t.Fatal(err)
	}
	key[0], val[0] = 'x', 'x'
	if got := fmtKV(get(t, s, "k")); got != "k@2/2/1=v1" {
		t.Fatalf("store aliased the request: %s", got)
	}
}

func TestDeleteRange(t *testing.T) {
	setup := func(t *testing.T) *Store {
		s := newStore()
		for _, k := range []string{"a", "b", "foo1", "foo2", "fop"} {
			put(t, s, k, "v"+k)
		}
		return s // rev 6
	}
	tests := []struct {
		name    string
		key     string
		end     string
		deleted int64
		prev    string
		left    string
	}{
		{"single", "b", "", 1, "b@3/3/1=vb", "a,foo1,foo2,fop"},
		{"missing", "c", "", 0, "", "a,b,foo1,foo2,fop"},
		{"range", "b", "foo2", 2, "b@3/3/1=vb foo1@4/4/1=vfoo1", "a,foo2,fop"},
		{"prefix", "foo", "fop", 2, "foo1@4/4/1=vfoo1 foo2@5/5/1=vfoo2", "a,b,fop"},
		{"from key", "foo2", "\x00", 2, "foo2@5/5/1=vfoo2 fop@6/6/1=vfop", "a,b,foo1"},
		{"all", "\x00", "\x00", 5, "a@2/2/1=va b@3/3/1=vb foo1@4/4/1=vfoo1 foo2@5/5/1=vfoo2 fop@6/6/1=vfop", ""},
		{"empty range", "z", "a", 0, "", "a,b,foo1,foo2,fop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setup(t)
			req := &pb.DeleteRangeRequest{Key: []byte(tt.key), PrevKv: true}
			if tt.end != "" {
				req.RangeEnd = []byte(tt.end)
			}
			resp, err := s.DeleteRange(req)
			if err != nil {
				t.Fatal(err)
			}
			wantRev := int64(6)
			if tt.deleted > 0 {
				wantRev = 7
			}
			if resp.Deleted != tt.deleted || resp.Header.Revision != wantRev || s.Rev() != wantRev {
				t.Errorf("deleted %d at %d (store %d), want %d at %d", resp.Deleted, resp.Header.Revision, s.Rev(), tt.deleted, wantRev)
			}
			if got := fmtKVs(resp.PrevKvs); got != tt.prev {
				t.Errorf("prev = %s, want %s", got, tt.prev)
			}
			all, _ := s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
			if got := keysOf(all.Kvs); got != tt.left {
				t.Errorf("left = %s, want %s", got, tt.left)
			}
			if s.KeyCount() != len(all.Kvs) {
				t.Errorf("KeyCount = %d, want %d", s.KeyCount(), len(all.Kvs))
			}
			// History before the delete is intact.
			old, _ := s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 6})
			if got := keysOf(old.Kvs); got != "a,b,foo1,foo2,fop" {
				t.Errorf("at rev 6: %s", got)
			}
		})
	}
	t.Run("without prev kv", func(t *testing.T) {
		s := setup(t)
		resp := del(t, s, "a", "")
		if resp.Deleted != 1 || resp.PrevKvs != nil {
			t.Errorf("resp = %v", resp)
		}
	})
	t.Run("empty key", func(t *testing.T) {
		_, err := newStore().DeleteRange(&pb.DeleteRangeRequest{})
		wantErr(t, err, ErrEmptyKey)
	})
}

func TestDeleteKeys(t *testing.T) {
	s := newStore(1)
	putLease(t, s, "a", "1", 1)
	putLease(t, s, "b", "2", 1)
	put(t, s, "c", "3") // rev 4
	sink := newSink()
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte{0}, RangeEnd: []byte{0}, Sink: sink}); err != nil {
		t.Fatal(err)
	}
	if rev := s.DeleteKeys([][]byte{[]byte("a"), []byte("missing"), []byte("b"), []byte("a")}); rev != 5 {
		t.Fatalf("rev = %d, want 5", rev)
	}
	if got := s.LeaseKeys(1); got != nil {
		t.Errorf("lease keys after delete: %q", got)
	}
	if s.KeyCount() != 1 {
		t.Errorf("KeyCount = %d", s.KeyCount())
	}
	want := []delivery{{id: 1, rev: 5, n: 2, evs: "DELETE a@0/5/0=; DELETE b@0/5/0="}}
	if got := sink.take(); !slices.Equal(got, want) {
		t.Errorf("events = %+v, want %+v", got, want)
	}
	if rev := s.DeleteKeys([][]byte{[]byte("a"), []byte("zzz")}); rev != 5 {
		t.Errorf("no-op DeleteKeys moved rev to %d", rev)
	}
	if rev := s.DeleteKeys(nil); rev != 5 {
		t.Errorf("empty DeleteKeys moved rev to %d", rev)
	}
	if len(sink.got) != 0 {
		t.Errorf("no-op DeleteKeys delivered %+v", sink.got)
	}
}

func TestLeaseKeys(t *testing.T) {
	s := newStore(1, 2)
	str := func(keys [][]byte) string {
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = string(k)
		}
		return strings.Join(parts, ",")
	}
	steps := []struct {
		name   string
		do     func()
		l1, l2 string
	}{
		{"attach", func() { putLease(t, s, "k2", "v", 1); putLease(t, s, "k1", "v", 1); putLease(t, s, "k3", "v", 2) }, "k1,k2", "k3"},
		{"move", func() { putLease(t, s, "k2", "v", 2) }, "k1", "k2,k3"},
		{"ignore lease keeps", func() {
			if _, err := s.Put(&pb.PutRequest{Key: []byte("k1"), Value: []byte("x"), IgnoreLease: true}); err != nil {
				t.Fatal(err)
			}
		}, "k1", "k2,k3"},
		{"detach", func() { put(t, s, "k3", "v") }, "k1", "k2"},
		{"delete", func() { del(t, s, "k1", "") }, "", "k2"},
		{"recreate without lease", func() { put(t, s, "k1", "v") }, "", "k2"},
		{"txn attach", func() {
			_, err := s.Txn(&pb.TxnRequest{Success: []*pb.RequestOp{
				{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k9"), Lease: 1}}},
				{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("k2")}}},
			}})
			if err != nil {
				t.Fatal(err)
			}
		}, "k9", ""},
	}
	for _, st := range steps {
		st.do()
		if got := str(s.LeaseKeys(1)); got != st.l1 {
			t.Errorf("%s: lease 1 = %s, want %s", st.name, got, st.l1)
		}
		if got := str(s.LeaseKeys(2)); got != st.l2 {
			t.Errorf("%s: lease 2 = %s, want %s", st.name, got, st.l2)
		}
	}
	// The returned keys are the caller's.
	keys := s.LeaseKeys(1)
	keys[0][0] = 'X'
	if got := str(s.LeaseKeys(1)); got != "k9" {
		t.Errorf("LeaseKeys aliased the store: %s", got)
	}
}

// rangesAt renders every key at every revision in [from, to].
func rangesAt(t *testing.T, s *Store, from, to int64) []string {
	t.Helper()
	var out []string
	for rev := from; rev <= to; rev++ {
		resp, err := s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
		if err != nil {
			t.Fatalf("range at %d: %v", rev, err)
		}
		out = append(out, fmt.Sprintf("%d: %s", rev, fmtKVs(resp.Kvs)))
	}
	return out
}

func TestCompact(t *testing.T) {
	s := newStore()
	put(t, s, "a", "1") // 2
	put(t, s, "b", "1") // 3
	put(t, s, "a", "2") // 4
	del(t, s, "b", "")  // 5
	put(t, s, "c", "1") // 6
	put(t, s, "a", "3") // 7
	del(t, s, "c", "")  // 8
	put(t, s, "b", "2") // 9
	before := rangesAt(t, s, 1, 9)

	_, err := s.Compact(0)
	wantErr(t, err, ErrCompacted)
	_, err = s.Compact(10)
	wantErr(t, err, ErrFutureRev)

	resp, err := s.Compact(5)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != 9 || s.CompactRev() != 5 || s.Rev() != 9 {
		t.Fatalf("header %d compact %d rev %d", resp.Header.Revision, s.CompactRev(), s.Rev())
	}
	if got := rangesAt(t, s, 5, 9); !slices.Equal(got, before[4:]) {
		t.Errorf("ranges after compaction:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(before[4:], "\n"))
	}
	_, err = s.Range(&pb.RangeRequest{Key: []byte("a"), Revision: 4})
	wantErr(t, err, ErrCompacted)
	// a keeps its version at 4; b's tombstone at 5 is dropped; everything later is kept.
	var log []string
	for _, r := range s.log {
		log = append(log, fmt.Sprintf("%s@%d%v", r.kv.Key, r.kv.ModRevision, r.tomb))
	}
	if got, want := strings.Join(log, " "), "a@4false c@6false a@7false c@8true b@9false"; got != want {
		t.Errorf("log = %s, want %s", got, want)
	}

	_, err = s.Compact(5)
	wantErr(t, err, ErrCompacted)
	_, err = s.Compact(4)
	wantErr(t, err, ErrCompacted)

	// Compacting at the current revision removes deleted keys entirely.
	if _, err := s.Compact(9); err != nil {
		t.Fatal(err)
	}
	if got := rangesAt(t, s, 9, 9); !slices.Equal(got, before[8:]) {
		t.Errorf("at 9: %v, want %v", got, before[8:])
	}
	if s.tree.Len() != 2 || len(s.log) != 2 {
		t.Errorf("index holds %d keys, log %d records, want 2", s.tree.Len(), len(s.log))
	}
	// Versions carry on after compaction; a dropped key starts over.
	if got := fmtKV(put(t, s, "a", "4").PrevKv); got != "<nil>" {
		t.Errorf("prev = %s", got)
	}
	if got := fmtKV(get(t, s, "a")); got != "a@2/10/4=4" {
		t.Errorf("a = %s", got)
	}
	put(t, s, "c", "2")
	if got := fmtKV(get(t, s, "c")); got != "c@11/11/1=2" {
		t.Errorf("c = %s", got)
	}
}

func TestCompactEmptyStore(t *testing.T) {
	s := newStore()
	if _, err := s.Compact(1); err != nil {
		t.Fatal(err)
	}
	_, err := s.Compact(1)
	wantErr(t, err, ErrCompacted)
}

// TestLeaseKeysManyKeys crosses the size where a lease's key set moves from
// a slice to a map, both ways.
func TestLeaseKeysManyKeys(t *testing.T) {
	s := newStore(1)
	want := map[string]bool{}
	check := func(step string) {
		t.Helper()
		got := s.LeaseKeys(1)
		if len(got) != len(want) {
			t.Fatalf("%s: %d keys, want %d", step, len(got), len(want))
		}
		for i, k := range got {
			if !want[string(k)] {
				t.Fatalf("%s: unexpected key %s", step, k)
			}
			if i > 0 && string(got[i-1]) >= string(k) {
				t.Fatalf("%s: keys not sorted: %s then %s", step, got[i-1], k)
			}
		}
	}
	for i := range 3 * leaseKeysFew {
		k := fmt.Sprintf("k%03d", i)
		putLease(t, s, k, "v", 1)
		putLease(t, s, k, "v2", 1) // attaching twice keeps one
		want[k] = true
		check(fmt.Sprintf("after %d puts", i+1))
	}
	for i := range 3*leaseKeysFew - 1 {
		k := fmt.Sprintf("k%03d", i)
		put(t, s, k, "v") // detach
		delete(want, k)
		check(fmt.Sprintf("after %d detaches", i+1))
	}
	del(t, s, fmt.Sprintf("k%03d", 3*leaseKeysFew-1), "")
	if got := s.LeaseKeys(1); got != nil {
		t.Fatalf("empty lease still lists %s", got)
	}
	if _, ok := s.leases[1]; ok {
		t.Fatal("an empty lease keeps its index entry")
	}
}

// TestCompactRandom compacts histories of random puts, deletes and
// multi-put transactions (several records per revision) and checks what
// Compact promises: every read at or after the compaction revision is
// unchanged, the log stays in (revision, sub) order, and the size counts
// exactly the records kept.
func TestCompactRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() string { return fmt.Sprintf("k%02d", rng.IntN(20)) }
	for round := range 30 {
		s := newStore()
		for range 200 {
			switch rng.IntN(4) {
			case 0:
				del(t, s, key(), "")
			case 1:
				a, b := key(), key()
				if a == b {
					continue
				}
				ops := []*pb.RequestOp{
					{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(a), Value: []byte("t")}}},
					{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(b), Value: []byte("t")}}},
				}
				if _, err := s.Txn(&pb.TxnRequest{Success: ops}); err != nil {
					t.Fatal(err)
				}
			default:
				put(t, s, key(), fmt.Sprint(rng.IntN(100)))
			}
			if rng.IntN(40) == 0 && s.Rev() > s.CompactRev()+1 {
				rev := s.CompactRev() + 1 + rng.Int64N(s.Rev()-s.CompactRev())
				before := rangesAt(t, s, rev, s.Rev())
				if _, err := s.Compact(rev); err != nil {
					t.Fatalf("round %d: compact %d: %v", round, rev, err)
				}
				if got := rangesAt(t, s, rev, s.Rev()); !slices.Equal(got, before) {
					t.Fatalf("round %d: reads changed by compacting at %d:\n%s\nwant\n%s", round, rev,
						strings.Join(got, "\n"), strings.Join(before, "\n"))
				}
				var size int64
				for i, r := range s.log {
					size += r.cost()
					if i > 0 && !s.log[i-1].before(r) {
						t.Fatalf("round %d: log out of order at %d after compacting at %d", round, i, rev)
					}
				}
				if size != s.Size() {
					t.Fatalf("round %d: Size() = %d, the log's records cost %d", round, s.Size(), size)
				}
			}
		}
	}
}

package kv

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// rangeFixture builds, at revisions 2..11:
//
//	a    create 2 mod 5  ver 2 "v0"
//	b    create 3 mod 11 ver 2 "v5"
//	c    create 4, deleted at 7
//	d    create 6 mod 6  ver 1 "v9"
//	foo1 8, foo2 9, fop 10, values f1 f2 f3
func rangeFixture(t *testing.T) *Store {
	s := newStore()
	put(t, s, "a", "v3")
	put(t, s, "b", "v1")
	put(t, s, "c", "v2")
	put(t, s, "a", "v0")
	put(t, s, "d", "v9")
	del(t, s, "c", "")
	put(t, s, "foo1", "f1")
	put(t, s, "foo2", "f2")
	put(t, s, "fop", "f3")
	put(t, s, "b", "v5")
	if s.Rev() != 11 {
		t.Fatalf("fixture rev = %d", s.Rev())
	}
	return s
}

func TestRange(t *testing.T) {
	s := rangeFixture(t)
	all := func(r *pb.RangeRequest) *pb.RangeRequest {
		r.Key, r.RangeEnd = []byte{0}, []byte{0}
		return r
	}
	tests := []struct {
		name  string
		req   *pb.RangeRequest
		keys  string
		count int64
		more  bool
	}{
		{"single", &pb.RangeRequest{Key: []byte("a")}, "a", 1, false},
		{"single missing", &pb.RangeRequest{Key: []byte("zz")}, "", 0, false},
		{"single deleted", &pb.RangeRequest{Key: []byte("c")}, "", 0, false},
		{"range", &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("foo2")}, "b,d,foo1", 3, false},
		{"prefix", &pb.RangeRequest{Key: []byte("foo"), RangeEnd: []byte("fop")}, "foo1,foo2", 2, false},
		{"from key", &pb.RangeRequest{Key: []byte("d"), RangeEnd: []byte{0}}, "d,foo1,foo2,fop", 4, false},
		{"all", all(&pb.RangeRequest{}), "a,b,d,foo1,foo2,fop", 6, false},
		{"empty range", &pb.RangeRequest{Key: []byte("d"), RangeEnd: []byte("a")}, "", 0, false},
		{"limit", all(&pb.RangeRequest{Limit: 2}), "a,b", 6, true},
		{"limit exact", all(&pb.RangeRequest{Limit: 6}), "a,b,d,foo1,foo2,fop", 6, false},
		{"limit above", all(&pb.RangeRequest{Limit: 100}), "a,b,d,foo1,foo2,fop", 6, false},
		{"key ascend", all(&pb.RangeRequest{SortOrder: pb.RangeRequest_ASCEND}), "a,b,d,foo1,foo2,fop", 6, false},
		{"key descend", all(&pb.RangeRequest{SortOrder: pb.RangeRequest_DESCEND}), "fop,foo2,foo1,d,b,a", 6, false},
		{"key descend limit", all(&pb.RangeRequest{SortOrder: pb.RangeRequest_DESCEND, Limit: 2}), "fop,foo2", 6, true},
		{"version none means ascend", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_VERSION}), "d,foo1,foo2,fop,a,b", 6, false},
		{"version ascend", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_VERSION, SortOrder: pb.RangeRequest_ASCEND}), "d,foo1,foo2,fop,a,b", 6, false},
		{"version descend", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_VERSION, SortOrder: pb.RangeRequest_DESCEND}), "a,b,d,foo1,foo2,fop", 6, false},
		{"create ascend", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_CREATE, SortOrder: pb.RangeRequest_ASCEND}), "a,b,d,foo1,foo2,fop", 6, false},
		{"create descend", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_CREATE, SortOrder: pb.RangeRequest_DESCEND}), "fop,foo2,foo1,d,b,a", 6, false},
		{"mod ascend", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_ASCEND}), "a,d,foo1,foo2,fop,b", 6, false},
		{"mod descend", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_DESCEND}), "b,fop,foo2,foo1,d,a", 6, false},
		{"value ascend", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_ASCEND}), "foo1,foo2,fop,a,b,d", 6, false},
		{"value descend", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_DESCEND}), "d,b,a,fop,foo2,foo1", 6, false},
		{"value descend limit", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_DESCEND, Limit: 2}), "d,b", 6, true},
		{"mod none limit", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, Limit: 3}), "a,d,foo1", 6, true},
		{"count only", all(&pb.RangeRequest{CountOnly: true}), "", 6, false},
		{"count only limit", all(&pb.RangeRequest{CountOnly: true, Limit: 1}), "", 6, false},
		{"min mod", all(&pb.RangeRequest{MinModRevision: 8}), "b,foo1,foo2,fop", 6, false},
		{"max mod", all(&pb.RangeRequest{MaxModRevision: 6}), "a,d", 6, false},
		{"min create", all(&pb.RangeRequest{MinCreateRevision: 6}), "d,foo1,foo2,fop", 6, false},
		{"max create", all(&pb.RangeRequest{MaxCreateRevision: 3}), "a,b", 6, false},
		{"min and max mod", all(&pb.RangeRequest{MinModRevision: 6, MaxModRevision: 9}), "d,foo1,foo2", 6, false},
		{"filter limit", all(&pb.RangeRequest{MinModRevision: 8, Limit: 2}), "b,foo1", 6, true},
		{"filter limit exact", all(&pb.RangeRequest{MinModRevision: 8, Limit: 4}), "b,foo1,foo2,fop", 6, false},
		{"filter sort limit", all(&pb.RangeRequest{MinModRevision: 8, SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_DESCEND, Limit: 2}), "b,fop", 6, true},
		{"at rev 4", all(&pb.RangeRequest{Revision: 4}), "a,b,c", 3, false},
		{"at rev 7", all(&pb.RangeRequest{Revision: 7}), "a,b,d", 3, false},
		{"at rev 1", all(&pb.RangeRequest{Revision: 1}), "", 0, false},
		{"at rev single", &pb.RangeRequest{Key: []byte("c"), Revision: 6}, "c", 1, false},
		{"at current rev", all(&pb.RangeRequest{Revision: 11}), "a,b,d,foo1,foo2,fop", 6, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.Range(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := keysOf(resp.Kvs); got != tt.keys {
				t.Errorf("keys = %q, want %q", got, tt.keys)
			}
			if resp.Count != tt.count {
				t.Errorf("count = %d, want %d", resp.Count, tt.count)
			}
			if resp.More != tt.more {
				t.Errorf("more = %v, want %v", resp.More, tt.more)
			}
			if resp.Header == nil || resp.Header.Revision != 11 {
				t.Errorf("header = %v, want revision 11", resp.Header)
			}
		})
	}
}

func TestRangeValues(t *testing.T) {
	s := rangeFixture(t)
	resp, err := s.Range(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("e")})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmtKVs(resp.Kvs), "a@2/5/2=v0 b@3/11/2=v5 d@6/6/1=v9"; got != want {
		t.Errorf("kvs = %s, want %s", got, want)
	}
	resp, _ = s.Range(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("e"), Revision: 4})
	if got, want := fmtKVs(resp.Kvs), "a@2/2/1=v3 b@3/3/1=v1 c@4/4/1=v2"; got != want {
		t.Errorf("kvs at 4 = %s, want %s", got, want)
	}
	resp, _ = s.Range(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("e"), KeysOnly: true})
	if got, want := fmtKVs(resp.Kvs), "a@2/5/2= b@3/11/2= d@6/6/1="; got != want {
		t.Errorf("keys only = %s, want %s", got, want)
	}
	// Responses are private copies: scribbling on one must not reach the store.
	resp.Kvs[0].Version = 99
	if kv := get(t, s, "a"); kv.Version != 2 {
		t.Errorf("store changed through a response: version %d", kv.Version)
	}
}

func TestRangeErrors(t *testing.T) {
	s := rangeFixture(t)
	if _, err := s.Compact(5); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  *pb.RangeRequest
		err  error
	}{
		{"empty key", &pb.RangeRequest{}, ErrEmptyKey},
		{"future", &pb.RangeRequest{Key: []byte("a"), Revision: 12}, ErrFutureRev},
		{"compacted", &pb.RangeRequest{Key: []byte("a"), Revision: 4}, ErrCompacted},
		{"bad sort order", &pb.RangeRequest{Key: []byte("a"), SortOrder: 7}, ErrInvalidSortOption},
		{"bad sort target", &pb.RangeRequest{Key: []byte("a"), SortTarget: 9}, ErrInvalidSortOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Range(tt.req)
			wantErr(t, err, tt.err)
		})
	}
	// The compaction revision itself stays readable, as in etcd.
	resp, err := s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 5})
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(resp.Kvs); got != "a,b,c" {
		t.Errorf("at compact rev: %s", got)
	}
}

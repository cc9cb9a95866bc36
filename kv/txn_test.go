package kv

import (
	"fmt"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func opPut(key, val string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(val)}}}
}

func opPutReq(p *pb.PutRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: p}}
}

func opDel(key, end string) *pb.RequestOp {
	d := &pb.DeleteRangeRequest{Key: []byte(key)}
	if end != "" {
		d.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}}
}

func opGet(key, end string) *pb.RequestOp {
	r := &pb.RangeRequest{Key: []byte(key)}
	if end != "" {
		r.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}}
}

func opTxn(t *pb.TxnRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}}
}

func cmpVersion(key string, res pb.Compare_CompareResult, v int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_VERSION, Result: res, TargetUnion: &pb.Compare_Version{Version: v}}
}

func TestTxnCompare(t *testing.T) {
	s := newStore(7)
	put(t, s, "k", "m")         // 2
	put(t, s, "x", "x")         // 3
	putLease(t, s, "k", "m", 7) // 4: k create 2 mod 4 version 2 value m lease 7

	type tc struct {
		target pb.Compare_CompareTarget
		union  func(n int64) any
		equal  int64 // the key's value of the target
	}
	targets := map[string]tc{
		"version": {pb.Compare_VERSION, func(n int64) any { return &pb.Compare_Version{Version: n} }, 2},
		"create":  {pb.Compare_CREATE, func(n int64) any { return &pb.Compare_CreateRevision{CreateRevision: n} }, 2},
		"mod":     {pb.Compare_MOD, func(n int64) any { return &pb.Compare_ModRevision{ModRevision: n} }, 4},
		"lease":   {pb.Compare_LEASE, func(n int64) any { return &pb.Compare_Lease{Lease: n} }, 7},
		// Values compare as bytes: "m" is 'l'+1 and 'n'-1.
		"value": {pb.Compare_VALUE, func(n int64) any { return &pb.Compare_Value{Value: []byte{byte('m' + n - 100)}} }, 100},
	}
	results := []struct {
		res               pb.Compare_CompareResult
		less, eq, greater bool // outcome when the operand is below, equal to, above the key's value
	}{
		{pb.Compare_EQUAL, false, true, false},
		{pb.Compare_NOT_EQUAL, true, false, true},
		{pb.Compare_GREATER, true, false, false},
		{pb.Compare_LESS, false, false, true},
	}
	for _, name := range []string{"version", "create", "mod", "lease", "value"} {
		tg := targets[name]
		for _, r := range results {
			for delta, want := range map[int64]bool{-1: r.less, 0: r.eq, 1: r.greater} {
				c := &pb.Compare{Key: []byte("k"), Target: tg.target, Result: r.res}
				switch u := tg.union(tg.equal + delta).(type) {
				case *pb.Compare_Version:
					c.TargetUnion = u
				case *pb.Compare_CreateRevision:
					c.TargetUnion = u
				case *pb.Compare_ModRevision:
					c.TargetUnion = u
				case *pb.Compare_Lease:
					c.TargetUnion = u
				case *pb.Compare_Value:
					c.TargetUnion = u
				}
				t.Run(fmt.Sprintf("%s %s %+d", name, r.res, delta), func(t *testing.T) {
					resp, err := s.Txn(&pb.TxnRequest{Compare: []*pb.Compare{c}})
					if err != nil {
						t.Fatal(err)
					}
					if resp.Succeeded != want {
						t.Errorf("succeeded = %v, want %v", resp.Succeeded, want)
					}
				})
			}
		}
	}

	more := []struct {
		name string
		cmps []*pb.Compare
		want bool
	}{
		{"missing version 0", []*pb.Compare{cmpVersion("nope", pb.Compare_EQUAL, 0)}, true},
		{"missing create less 1", []*pb.Compare{{Key: []byte("nope"), Target: pb.Compare_CREATE, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 1}}}, true},
		{"missing value equal empty", []*pb.Compare{{Key: []byte("nope"), Target: pb.Compare_VALUE, TargetUnion: &pb.Compare_Value{}}}, false},
		{"missing value not equal", []*pb.Compare{{Key: []byte("nope"), Target: pb.Compare_VALUE, Result: pb.Compare_NOT_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("a")}}}, false},
		{"all must hold", []*pb.Compare{cmpVersion("k", pb.Compare_EQUAL, 2), cmpVersion("x", pb.Compare_EQUAL, 2)}, false},
		{"both hold", []*pb.Compare{cmpVersion("k", pb.Compare_EQUAL, 2), cmpVersion("x", pb.Compare_EQUAL, 1)}, true},
		{"range all hold", []*pb.Compare{{Key: []byte("a"), RangeEnd: []byte("z"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{}}}, true},
		{"range one fails", []*pb.Compare{{Key: []byte("a"), RangeEnd: []byte("z"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 2}}}, false},
		{"range from key", []*pb.Compare{{Key: []byte("l"), RangeEnd: []byte{0}, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: 3}}}, true},
		{"empty range compares zero", []*pb.Compare{{Key: []byte("p"), RangeEnd: []byte("q"), Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_CreateRevision{}}}, true},
		{"no compares", nil, true},
	}
	for _, tt := range more {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.Txn(&pb.TxnRequest{Compare: tt.cmps, Success: []*pb.RequestOp{opGet("k", "")}, Failure: []*pb.RequestOp{opGet("x", "")}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Succeeded != tt.want {
				t.Errorf("succeeded = %v, want %v", resp.Succeeded, tt.want)
			}
			key := resp.Responses[0].GetResponseRange().Kvs[0].Key
			if wantKey := map[bool]string{true: "k", false: "x"}[tt.want]; string(key) != wantKey {
				t.Errorf("ran the branch reading %s", key)
			}
		})
	}
	if s.Rev() != 4 {
		t.Errorf("read-only txns moved the revision to %d", s.Rev())
	}
}

func TestTxnWrites(t *testing.T) {
	s := newStore(7)
	put(t, s, "a", "1") // 2
	put(t, s, "b", "1") // 3
	sink := newSink()
	if err := s.Watch(WatchRequest{ID: 1, Key: []byte{0}, RangeEnd: []byte{0}, Sink: sink}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Txn(&pb.TxnRequest{
		Compare: []*pb.Compare{cmpVersion("a", pb.Compare_EQUAL, 1)},
		Success: []*pb.RequestOp{
			opGet("a", ""),
			opPut("a", "2"),
			opGet("a", ""),
			opPutReq(&pb.PutRequest{Key: []byte("c"), Value: []byte("1"), Lease: 7, PrevKv: true}),
			opDel("b", ""),
			opGet("\x00", "\x00"),
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 3}}},
			{},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded || resp.Header.Revision != 4 || s.Rev() != 4 {
		t.Fatalf("succeeded %v header %d rev %d", resp.Succeeded, resp.Header.Revision, s.Rev())
	}
	r := resp.Responses
	checks := []struct{ got, want string }{
		{fmtKVs(r[0].GetResponseRange().Kvs), "a@2/2/1=1"},
		{fmt.Sprint(r[0].GetResponseRange().Header.Revision), "3"},
		{fmt.Sprint(r[1].GetResponsePut().Header.Revision), "4"},
		{fmtKVs(r[2].GetResponseRange().Kvs), "a@2/4/2=2"}, // reads see the txn's own writes
		{fmt.Sprint(r[2].GetResponseRange().Header.Revision), "4"},
		{fmtKV(r[3].GetResponsePut().PrevKv), "<nil>"},
		{fmt.Sprint(r[4].GetResponseDeleteRange().Deleted), "1"},
		{fmtKVs(r[5].GetResponseRange().Kvs), "a@2/4/2=2 c@4/4/1=1#7"},
		{fmtKVs(r[6].GetResponseRange().Kvs), "a@2/2/1=1"},
		{fmt.Sprint(r[7].Response == nil), "true"},
	}
	for i, c := range checks {
		if c.got != c.want {
			t.Errorf("check %d: got %s, want %s", i, c.got, c.want)
		}
	}
	// One revision, sub-revisions in op order, one delivery.
	want := []delivery{{id: 1, rev: 4, n: 3, evs: "PUT a@2/4/2=2; PUT c@4/4/1=1#7; DELETE b@0/4/0="}}
	if got := sink.take(); !slices.Equal(got, want) {
		t.Errorf("events %+v, want %+v", got, want)
	}
	var subs []int64
	for _, rec := range s.log[len(s.log)-3:] {
		subs = append(subs, rec.sub)
	}
	if !slices.Equal(subs, []int64{0, 1, 2}) {
		t.Errorf("subs = %v", subs)
	}

	// The failure branch runs when a compare fails; a delete of nothing
	// writes nothing and does not bump the revision.
	resp, err = s.Txn(&pb.TxnRequest{
		Compare: []*pb.Compare{cmpVersion("a", pb.Compare_EQUAL, 1)},
		Success: []*pb.RequestOp{opPut("a", "x")},
		Failure: []*pb.RequestOp{opDel("nothing", "")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded || resp.Header.Revision != 4 || s.Rev() != 4 || len(sink.got) != 0 {
		t.Errorf("succeeded %v header %d rev %d deliveries %d", resp.Succeeded, resp.Header.Revision, s.Rev(), len(sink.got))
	}
}

func TestTxnNested(t *testing.T) {
	s := newStore()
	put(t, s, "a", "1") // 2
	resp, err := s.Txn(&pb.TxnRequest{
		Compare: []*pb.Compare{cmpVersion("a", pb.Compare_EQUAL, 1)},
		Success: []*pb.RequestOp{
			opPut("x", "1"),
			// Compares are evaluated before the txn writes anything (as in
			// etcd), so x still looks absent here.
			opTxn(&pb.TxnRequest{
				Compare: []*pb.Compare{cmpVersion("x", pb.Compare_EQUAL, 0)},
				Success: []*pb.RequestOp{opPut("y", "1"), opGet("x", "")},
				Failure: []*pb.RequestOp{opPut("z", "1")},
			}),
			opTxn(&pb.TxnRequest{
				Compare: []*pb.Compare{cmpVersion("a", pb.Compare_EQUAL, 5)},
				Success: []*pb.RequestOp{opPut("u", "2")},
				Failure: []*pb.RequestOp{opPut("w", "1"), opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("v", "1")}})},
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded || s.Rev() != 3 || resp.Header.Revision != 3 {
		t.Fatalf("succeeded %v rev %d header %d", resp.Succeeded, s.Rev(), resp.Header.Revision)
	}
	n1 := resp.Responses[1].GetResponseTxn()
	n2 := resp.Responses[2].GetResponseTxn()
	if !n1.Succeeded || n2.Succeeded || !n2.Responses[1].GetResponseTxn().Succeeded {
		t.Errorf("nested outcomes %v %v", n1.Succeeded, n2.Succeeded)
	}
	if got := fmtKVs(n1.Responses[1].GetResponseRange().Kvs); got != "x@3/3/1=1" {
		t.Errorf("nested read = %s", got)
	}
	if n1.Header == nil || n1.Header.Revision != 3 {
		t.Errorf("nested header %v", n1.Header)
	}
	all, _ := s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if got := keysOf(all.Kvs); got != "a,v,w,x,y" {
		t.Errorf("keys = %s", got)
	}
}

func TestTxnAtomicFailure(t *testing.T) {
	tests := []struct {
		name string
		txn  *pb.TxnRequest
		err  error
	}{
		{"lease not found in the middle", &pb.TxnRequest{Success: []*pb.RequestOp{
			opPut("a", "new"),
			opPutReq(&pb.PutRequest{Key: []byte("b"), Value: []byte("new"), Lease: 99}),
			opDel("c", ""),
		}}, ErrLeaseNotFound},
		{"lease not found nested", &pb.TxnRequest{Success: []*pb.RequestOp{
			opPut("a", "new"),
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPutReq(&pb.PutRequest{Key: []byte("b"), Lease: 99})}}),
		}}, ErrLeaseNotFound},
		{"ignore value on missing key", &pb.TxnRequest{Success: []*pb.RequestOp{
			opDel("c", ""),
			opPutReq(&pb.PutRequest{Key: []byte("nope"), IgnoreValue: true}),
		}}, ErrKeyNotFound},
		{"ignore lease on missing key", &pb.TxnRequest{Success: []*pb.RequestOp{
			opPut("a", "new"),
			opPutReq(&pb.PutRequest{Key: []byte("nope"), IgnoreLease: true}),
		}}, ErrKeyNotFound},
		{"future range revision", &pb.TxnRequest{Success: []*pb.RequestOp{
			opPut("a", "new"),
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 5}}},
		}}, ErrFutureRev},
		{"value provided", &pb.TxnRequest{Success: []*pb.RequestOp{
			opPut("a", "new"),
			opPutReq(&pb.PutRequest{Key: []byte("b"), Value: []byte("x"), IgnoreValue: true}),
		}}, ErrValueProvided},
		{"lease provided in unused branch", &pb.TxnRequest{
			Success: []*pb.RequestOp{opPut("a", "new")},
			Failure: []*pb.RequestOp{opPutReq(&pb.PutRequest{Key: []byte("b"), Lease: 1, IgnoreLease: true})},
		}, ErrLeaseProvided},
		{"empty key op", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "new"), opPut("", "x")}}, ErrEmptyKey},
		{"empty key delete", &pb.TxnRequest{Success: []*pb.RequestOp{opDel("", "")}}, ErrEmptyKey},
		{"empty key compare", &pb.TxnRequest{Compare: []*pb.Compare{{}}, Success: []*pb.RequestOp{opPut("a", "new")}}, ErrEmptyKey},
		{"nil put", &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{}}}}, ErrEmptyKey},
		{"bad sort in range op", &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), SortOrder: 9}}}}}, ErrInvalidSortOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore()
			put(t, s, "a", "old")
			put(t, s, "b", "old")
			put(t, s, "c", "old") // rev 4
			before := rangesAt(t, s, 1, 4)
			sink := newSink()
			if err := s.Watch(WatchRequest{ID: 1, Key: []byte{0}, RangeEnd: []byte{0}, Sink: sink}); err != nil {
				t.Fatal(err)
			}
			_, err := s.Txn(tt.txn)
			wantErr(t, err, tt.err)
			if s.Rev() != 4 || s.KeyCount() != 3 || len(s.log) != 3 || len(sink.got) != 0 {
				t.Errorf("failed txn left traces: rev %d keys %d log %d events %d", s.Rev(), s.KeyCount(), len(s.log), len(sink.got))
			}
			if got := rangesAt(t, s, 1, 4); !slices.Equal(got, before) {
				t.Errorf("state changed: %v", got)
			}
		})
	}
}

func TestTxnDuplicateKey(t *testing.T) {
	tests := []struct {
		name string
		ops  []*pb.RequestOp
		dup  bool
	}{
		{"put put", []*pb.RequestOp{opPut("a", "1"), opPut("a", "2")}, true},
		{"put put distinct", []*pb.RequestOp{opPut("a", "1"), opPut("b", "2")}, false},
		{"put delete", []*pb.RequestOp{opPut("a", "1"), opDel("a", "")}, true},
		{"delete put", []*pb.RequestOp{opDel("a", ""), opPut("a", "1")}, true},
		{"put in deleted range", []*pb.RequestOp{opDel("a", "c"), opPut("b", "1")}, true},
		{"put at range end", []*pb.RequestOp{opDel("a", "c"), opPut("c", "1")}, false},
		{"put in from-key delete", []*pb.RequestOp{opPut("foo", "1"), opDel("f", "\x00")}, true},
		{"put before from-key delete", []*pb.RequestOp{opPut("e", "1"), opDel("f", "\x00")}, false},
		{"put in delete all", []*pb.RequestOp{opDel("\x00", "\x00"), opPut("zzz", "1")}, true},
		{"delete delete overlap", []*pb.RequestOp{opDel("a", "c"), opDel("b", "d")}, false},
		{"get put", []*pb.RequestOp{opGet("a", ""), opPut("a", "1")}, false},
		{"nested put vs outer put", []*pb.RequestOp{
			opPut("a", "1"),
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "2")}}),
		}, true},
		{"nested failure put vs outer put", []*pb.RequestOp{
			opTxn(&pb.TxnRequest{Failure: []*pb.RequestOp{opPut("a", "2")}}),
			opPut("a", "1"),
		}, true},
		{"nested branches may overlap", []*pb.RequestOp{
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "1")}, Failure: []*pb.RequestOp{opDel("a", "")}}),
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("b", "1")}, Failure: []*pb.RequestOp{opPut("b", "2")}}),
		}, false},
		{"nested delete vs later outer put", []*pb.RequestOp{
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opDel("a", "z")}}),
			opPut("b", "1"),
		}, true},
		{"nested put vs earlier outer delete", []*pb.RequestOp{
			opDel("a", "z"),
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("b", "1")}}),
		}, true},
		{"nested put vs sibling nested delete", []*pb.RequestOp{
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("b", "1")}}),
			opTxn(&pb.TxnRequest{Failure: []*pb.RequestOp{opDel("a", "z")}}),
		}, true},
		{"deep duplicate inside one branch", []*pb.RequestOp{
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{
				opPut("a", "1"),
				opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "2")}}),
			}}),
		}, true},
	}
	for _, tt := range tests {
		for _, inFailure := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s failure=%v", tt.name, inFailure), func(t *testing.T) {
				s := newStore()
				put(t, s, "a", "0")
				txn := &pb.TxnRequest{Success: tt.ops}
				if inFailure {
					// Duplicates are rejected even in the branch that would not run.
					txn = &pb.TxnRequest{Failure: tt.ops}
				}
				_, err := s.Txn(txn)
				if tt.dup {
					wantErr(t, err, ErrDuplicateKey)
					if s.Rev() != 2 {
						t.Errorf("rev moved to %d", s.Rev())
					}
				} else if err != nil {
					t.Fatalf("unexpected %v", err)
				}
			})
		}
	}
}

func TestTxnCompacted(t *testing.T) {
	s := newStore()
	put(t, s, "a", "1")
	put(t, s, "a", "2")
	put(t, s, "a", "3")
	if _, err := s.Compact(3); err != nil {
		t.Fatal(err)
	}
	_, err := s.Txn(&pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 2}}}}})
	wantErr(t, err, ErrCompacted)
	resp, err := s.Txn(&pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 3}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmtKVs(resp.Responses[0].GetResponseRange().Kvs); got != "a@2/3/2=2" {
		t.Errorf("at 3: %s", got)
	}
}

package kv

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// leaseSet is a LeaseExists backed by a fixed set of granted IDs.
func leaseSet(ids ...int64) func(int64) bool {
	m := make(map[int64]bool)
	for _, id := range ids {
		m[id] = true
	}
	return func(id int64) bool { return m[id] }
}

func newStore(leases ...int64) *Store {
	return NewStore(Options{LeaseExists: leaseSet(leases...)})
}

func put(t testing.TB, s *Store, key, val string) *pb.PutResponse {
	t.Helper()
	return putLease(t, s, key, val, 0)
}

func putLease(t testing.TB, s *Store, key, val string, lease int64) *pb.PutResponse {
	t.Helper()
	resp, err := s.Put(&pb.PutRequest{Key: []byte(key), Value: []byte(val), Lease: lease})
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return resp
}

func del(t testing.TB, s *Store, key, end string) *pb.DeleteRangeResponse {
	t.Helper()
	req := &pb.DeleteRangeRequest{Key: []byte(key)}
	if end != "" {
		req.RangeEnd = []byte(end)
	}
	resp, err := s.DeleteRange(req)
	if err != nil {
		t.Fatalf("delete %q: %v", key, err)
	}
	return resp
}

func get(t testing.TB, s *Store, key string) *mvccpb.KeyValue {
	t.Helper()
	resp, err := s.Range(&pb.RangeRequest{Key: []byte(key)})
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

// fmtKV renders a KeyValue compactly: key@create/mod/version=value[#lease].
func fmtKV(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "<nil>"
	}
	s := fmt.Sprintf("%s@%d/%d/%d=%s", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Value)
	if kv.Lease != 0 {
		s += fmt.Sprintf("#%d", kv.Lease)
	}
	return s
}

func fmtKVs(kvs []*mvccpb.KeyValue) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = fmtKV(kv)
	}
	return strings.Join(parts, " ")
}

func keysOf(kvs []*mvccpb.KeyValue) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = string(kv.Key)
	}
	return strings.Join(parts, ",")
}

func fmtEvents(evs []*mvccpb.Event) string {
	parts := make([]string, len(evs))
	for i, ev := range evs {
		parts[i] = ev.Type.String() + " " + fmtKV(ev.Kv)
		if ev.PrevKv != nil {
			parts[i] += " prev " + fmtKV(ev.PrevKv)
		}
	}
	return strings.Join(parts, "; ")
}

func wantErr(t testing.TB, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("error = %v, want %v", got, want)
	}
}

// delivery is one Deliver call seen by a testSink.
type delivery struct {
	id  WatchID
	rev int64
	evs string
	n   int
}

// testSink records deliveries; it refuses once it holds capacity of them
// (capacity < 0 means unlimited).
type testSink struct {
	capacity int
	got      []delivery
	canceled map[WatchID]int64
}

func newSink() *testSink { return &testSink{capacity: -1} }

func (k *testSink) Deliver(id WatchID, rev int64, evs []*mvccpb.Event) bool {
	if k.capacity >= 0 && len(k.got) >= k.capacity {
		return false
	}
	k.got = append(k.got, delivery{id: id, rev: rev, evs: fmtEvents(evs), n: len(evs)})
	return true
}

func (k *testSink) Canceled(id WatchID, compactRev int64) {
	if k.canceled == nil {
		k.canceled = make(map[WatchID]int64)
	}
	k.canceled[id] = compactRev
}

func (k *testSink) revs(id WatchID) []int64 {
	var out []int64
	for _, d := range k.got {
		if d.id == id {
			out = append(out, d.rev)
		}
	}
	return out
}

func (k *testSink) take() []delivery {
	out := k.got
	k.got = nil
	return out
}

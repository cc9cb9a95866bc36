package kv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The shapes follow etcd's benchmark tool defaults: short keys, 256-byte values.
const benchKeys = 10000

func benchKeyList() [][]byte {
	keys := make([][]byte, benchKeys)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("/bench/key/%08d", i))
	}
	return keys
}

func BenchmarkPut(b *testing.B) {
	s := newStore()
	keys := benchKeyList()
	val := make([]byte, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Put(&pb.PutRequest{Key: keys[i%benchKeys], Value: val}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTxnCompareAndPut(b *testing.B) {
	s := newStore()
	keys := benchKeyList()
	val := make([]byte, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i%benchKeys]
		_, err := s.Txn(&pb.TxnRequest{
			Compare: []*pb.Compare{{Key: k, Target: pb.Compare_CREATE, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_CreateRevision{}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: val}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: val}}}},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func filledStore(b *testing.B) (*Store, [][]byte) {
	s := newStore()
	keys := benchKeyList()
	val := make([]byte, 256)
	for round := 0; round < 3; round++ {
		for _, k := range keys {
			if _, err := s.Put(&pb.PutRequest{Key: k, Value: val}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return s, keys
}

func BenchmarkRangeSingleKey(b *testing.B) {
	s, keys := filledStore(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := s.Range(&pb.RangeRequest{Key: keys[(i*7919)%benchKeys]})
		if err != nil || len(resp.Kvs) != 1 {
			b.Fatal(err)
		}
	}
}

func BenchmarkRangeSingleKeyParallel(b *testing.B) {
	s, keys := filledStore(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb_ *testing.PB) {
		i := 0
		for pb_.Next() {
			i++
			if _, err := s.Range(&pb.RangeRequest{Key: keys[(i*7919)%benchKeys]}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkRangePrefix100(b *testing.B) {
	s, _ := filledStore(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := []byte(fmt.Sprintf("/bench/key/%06d", (i*37)%98))
		end := append([]byte(nil), start...)
		end[len(end)-1]++
		resp, err := s.Range(&pb.RangeRequest{Key: start, RangeEnd: end})
		if err != nil || len(resp.Kvs) != 100 {
			b.Fatal(err, len(resp.Kvs))
		}
	}
}

type nopSink struct{ n int }

func (k *nopSink) Deliver(WatchID, int64, []*mvccpb.Event) bool { k.n++; return true }

// BenchmarkWatchFanout measures one Put delivered to many watchers of its key
// (ns/op is per Put, i.e. per fan-out).
func BenchmarkWatchFanout(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		for _, prev := range []bool{false, true} {
			b.Run(fmt.Sprintf("watchers=%d/prevkv=%v", n, prev), func(b *testing.B) {
				s := newStore()
				sink := &nopSink{}
				for i := 0; i < n; i++ {
					if err := s.Watch(WatchRequest{ID: WatchID(i), Key: []byte("/bench/watched"), PrevKV: prev, Sink: sink}); err != nil {
						b.Fatal(err)
					}
				}
				// Unrelated single-key and range watchers that must be skipped cheaply.
				for i := 0; i < 100; i++ {
					if err := s.Watch(WatchRequest{ID: WatchID(n + i), Key: []byte(fmt.Sprintf("/other/%d", i)), Sink: sink}); err != nil {
						b.Fatal(err)
					}
				}
				val := make([]byte, 256)
				req := &pb.PutRequest{Key: []byte("/bench/watched"), Value: val}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := s.Put(req); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if sink.n != n*b.N {
					b.Fatalf("delivered %d, want %d", sink.n, n*b.N)
				}
			})
		}
	}
}

// BenchmarkMillionKeys loads 1,000,000 keys of the scale run's shape (8-byte
// keys, 100-byte values, bench-vs-etcd's keys workload) and reports the
// live heap per key, then restores a snapshot of them once per iteration
// (the work a restarting member does before it can serve) and compacts.
//
//	go test -run '^$' -bench MillionKeys -benchtime 3x ./kv
func BenchmarkMillionKeys(b *testing.B) {
	const n = 1_000_000
	val := make([]byte, 100)
	key := func(i int) []byte {
		k := make([]byte, 8)
		binary.PutVarint(k, int64(i))
		return k
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := newStore()
	for i := range n {
		if _, err := s.Put(&pb.PutRequest{Key: key(i), Value: val}); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heapPerKey := float64(after.HeapAlloc-before.HeapAlloc) / n
	var snap bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&snap); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		r := newStore()
		if err := r.Restore(bytes.NewReader(snap.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	start := time.Now()
	if _, err := s.Compact(s.rev); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "compact-ms")
	b.ReportMetric(heapPerKey, "heap-bytes/key")
	runtime.KeepAlive(s)
}

package cache

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// BenchmarkEntryMemory reports the client's memory per cached key: 100,000
// keys of 16 bytes with 16-byte values, as the answers' KeyValues hold them.
func BenchmarkEntryMemory(b *testing.B) {
	const n = 100_000
	kvs := make([]*mvccpb.KeyValue, n)
	var perKey float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := newCache(nil, config{maxKeys: n, clock: realClock{}})
		deadline := time.Now().Add(time.Hour)
		for i := range n {
			k := fmt.Sprintf("/config/key-%05d", i)
			kvs[i] = &mvccpb.KeyValue{Key: []byte(k), Value: []byte("value-0123456789"), ModRevision: int64(i)}
			c.storeLocked(k, kvs[i], deadline)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(c)
	}
	b.ReportMetric(perKey, "B/key")
}

// BenchmarkHit is the cost of a Get answered from memory.
func BenchmarkHit(b *testing.B) {
	c := newCache(nil, config{maxKeys: 10, clock: realClock{}})
	c.storeLocked("k", &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v")}, time.Now().Add(time.Hour))
	ctx := b.Context()
	for b.Loop() {
		if kv, err := c.Get(ctx, "k"); err != nil || kv == nil {
			b.Fatal(kv, err)
		}
	}
}

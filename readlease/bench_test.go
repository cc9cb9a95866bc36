package readlease

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkTableMemory reports the leader's memory per held read lease:
// 100,000 keys of 16 bytes, one holder each.
func BenchmarkTableMemory(b *testing.B) {
	const n = 100_000
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("/config/key-%05d", i))
	}
	var perKey float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tb := NewTable(dur, Limits{MaxKeys: n, MaxHoldersPerKey: 1}, t0)
		tb.AddHolder(1)
		for _, k := range keys {
			if tb.Grant(1, k, 0, t0) == 0 {
				b.Fatal("grant refused")
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(tb)
	}
	b.ReportMetric(perKey, "B/lease")
}

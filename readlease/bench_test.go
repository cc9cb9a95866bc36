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

// BenchmarkBeginRange is a range write's admission with 100,000 leases
// held: it visits the ten keys in its range (holder 1 answers, so the
// leases are granted again for the next round).
func BenchmarkBeginRange(b *testing.B) {
	const n = 100_000
	tb := NewTable(dur, Limits{MaxKeys: n, MaxHoldersPerKey: 1}, t0)
	tb.AddHolder(1)
	for i := range n {
		tb.Grant(1, []byte(fmt.Sprintf("/config/key-%05d", i)), 0, t0)
	}
	w := Write{Ranges: [][2][]byte{{[]byte("/config/key-05000"), []byte("/config/key-05010")}}}
	for b.Loop() {
		p, invs := tb.Begin(w, noLeaseKeys, t0)
		if len(invs) != 1 || len(invs[0].Keys) != 10 {
			b.Fatalf("invalidations %v, want one of 10 keys", invs)
		}
		tb.Ack(1, invs[0].Seq)
		tb.End(p)
		for i := 5000; i < 5010; i++ {
			tb.Grant(1, []byte(fmt.Sprintf("/config/key-%05d", i)), 0, t0)
		}
	}
}

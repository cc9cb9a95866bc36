package lease

import (
	"testing"
	"time"
)

// BenchmarkCheckpointCost replays 60 s of a leader's checkpoint ticks over
// 100,000 live leases on a simulated clock and reports the replicated cost
// the tracker produces: entries and bytes per second of cluster time.
//
//	go test -run '^$' -bench CheckpointCost -benchtime 1x ./lease/
func BenchmarkCheckpointCost(b *testing.B) {
	for _, tc := range []struct {
		name      string
		keepAlive time.Duration // 0: holders stopped, leases idle until expiry
	}{
		{"idle-ttl60", 0},
		{"keepalive-every-ttl/3-ttl60", 20 * time.Second},
		{"keepalive-every-ttl/3-ttl10", 10 * time.Second / 3},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const n, batch = 100_000, 1000
			const tick = 100 * time.Millisecond
			const span = 60 * time.Second
			ttl := int64(60)
			if tc.keepAlive > 0 && tc.keepAlive < 5*time.Second {
				ttl = 10
			}
			c := &fakeClock{t: time.Unix(0, 0)}
			tr := NewTracker(c, TrackerConfig{CheckpointAfter: time.Second})
			tr.Promote(0, nil)
			for id := int64(1); id <= n; id++ {
				tr.Granted(id, ttl)
			}
			// Spread keep-alives evenly over the interval, as independent holders do.
			next := int64(1)
			perTick := 0
			if tc.keepAlive > 0 {
				perTick = int(int64(n) * int64(tick) / int64(tc.keepAlive))
			}
			entries, bytes := 0, 0
			b.ResetTimer()
			for elapsed := time.Duration(0); elapsed < span; elapsed += tick {
				c.advance(tick)
				for range perTick {
					tr.Renew(next)
					next = next%n + 1
				}
				for {
					cp, _ := tr.TakeCheckpoint(batch)
					if cp == nil {
						break
					}
					entries++
					bytes += cp.Size() + 2 // the fsm envelope
					if len(cp.Expiries) < batch {
						break
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(entries)/span.Seconds(), "entries/s")
			b.ReportMetric(float64(bytes)/span.Seconds(), "bytes/s")
		})
	}
}

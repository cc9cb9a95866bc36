package logstore

import "github.com/prometheus/client_golang/prometheus"

// metrics are the store's series. Their names are the ones
// deploy/grafana/corenode.json charts; rename both together.
type metrics struct {
	fsync         prometheus.Histogram
	verifications *prometheus.CounterVec
	writable      prometheus.Collector
}

// fsyncBuckets span a loopback commit's append (sub-millisecond) to a
// stalled disk.
var fsyncBuckets = []float64{.0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1.024, 2.048, 4.096}

func newMetrics(h *Health) *metrics {
	return &metrics{
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corenode_disk_fsync_seconds",
			Help: "Time to append a batch of log entries to the raft log, including its fsync.", Buckets: fsyncBuckets}),
		verifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corenode_log_verifications_total",
			Help: "Checkpoint ranges of the raft log this member verified (logstore/verify.go), by result: ok, mismatch (the log is not the leader's), incomplete (compacted before it was read back), error (could not read it)."},
			[]string{"result"}),
		writable: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corenode_disk_writable",
			Help: "1 if this member can persist its raft state; 0 after a write failed (a full disk), until a probe of the disk succeeds."},
			func() float64 {
				if h.Writable() {
					return 1
				}
				return 0
			}),
	}
}

// Collectors are the store's series, for the member's registry: the time
// each append takes, the log verifications by result, and whether the
// store can persist. They are collected whether or not anyone registers
// them.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.metrics.fsync, s.metrics.verifications, s.metrics.writable}
}

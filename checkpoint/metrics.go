package checkpoint

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the lease scheduler's Prometheus series. The Lease API's
// counters (grants, revokes, keep-alives) are package lessor's.
type Metrics struct {
	Expired           prometheus.Counter
	CheckpointEntries prometheus.Counter
	CheckpointBytes   prometheus.Counter
	// ExpiryLag is the time from a lease's deadline to its expiry applying
	// on the leader.
	ExpiryLag prometheus.Histogram
}

// NewMetrics creates the series and registers them with reg when it is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Expired:           prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_lease_expired_total", Help: "Leases this member, as leader, expired."}),
		CheckpointEntries: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_lease_checkpoint_entries_total", Help: "Lease checkpoint entries proposed."}),
		CheckpointBytes:   prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_lease_checkpoint_bytes_total", Help: "Bytes of lease checkpoint entries proposed."}),
		ExpiryLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corenode_lease_expiry_lag_seconds",
			Help:    "Time from a lease's deadline to its expiry applying on the leader.",
			Buckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}),
	}
	if reg != nil {
		reg.MustRegister(m.Expired, m.CheckpointEntries, m.CheckpointBytes, m.ExpiryLag)
	}
	return m
}

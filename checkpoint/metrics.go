package checkpoint

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the lease scheduler's Prometheus series.
type Metrics struct {
	KeepAlives        prometheus.Counter
	Expired           prometheus.Counter
	CheckpointEntries prometheus.Counter
	CheckpointBytes   prometheus.Counter
}

// NewMetrics creates the series and registers them with reg when it is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		KeepAlives:        prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_lease_keepalives_total", Help: "Keep-alives handled by this member as leader."}),
		Expired:           prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_lease_expired_total", Help: "Leases this member, as leader, expired."}),
		CheckpointEntries: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_lease_checkpoint_entries_total", Help: "Lease checkpoint entries proposed."}),
		CheckpointBytes:   prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_lease_checkpoint_bytes_total", Help: "Bytes of lease checkpoint entries proposed."}),
	}
	if reg != nil {
		reg.MustRegister(m.KeepAlives, m.Expired, m.CheckpointEntries, m.CheckpointBytes)
	}
	return m
}

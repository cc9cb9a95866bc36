package readlease

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	grants        prometheus.Counter
	unleased      prometheus.Counter
	hits          prometheus.Counter
	invalidations prometheus.Counter
	delayed       prometheus.Counter
	readsWaited   prometheus.Counter
	delay         prometheus.Histogram
	held          prometheus.Gauge
	sessions      prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		grants: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_read_lease_grants_total",
			Help: "Read leases this member granted as leader."}),
		unleased: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_read_lease_unleased_reads_total",
			Help: "Cache reads answered without a lease (a write waiting on the key, a limit reached, a slow leadership confirmation, or leases disabled)."}),
		hits: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_read_lease_hits_total",
			Help: "Cache reads answered from memory, as the caches report them with their next request to the leader."}),
		invalidations: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_read_lease_invalidations_total",
			Help: "Invalidations sent to read-lease holders."}),
		delayed: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_read_lease_delayed_writes_total",
			Help: "Writes held back by read leases: waiting for holders to drop a key, or a new leader waiting out its predecessors' leases."}),
		readsWaited: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_read_lease_reads_waited_total",
			Help: "Cache reads that waited for a write of their key to finish before they were answered (for a write still waiting for its holders, briefly)."}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corenode_read_lease_write_delay_seconds",
			Help:    "How long writes held back by read leases waited.",
			Buckets: []float64{.0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1.024, 2.048, 4.096, 8.192}}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "corenode_read_lease_held",
			Help: "Read leases the leader holds on record (some may have run out since the last sweep)."}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "corenode_read_lease_sessions",
			Help: "Cache sessions served by this member as leader."}),
	}
}

// registeredMetrics returns the manager's metrics, registered with reg when
// it is not nil.
func registeredMetrics(reg prometheus.Registerer) *metrics {
	m := newMetrics()
	if reg != nil {
		reg.MustRegister(m.grants, m.unleased, m.hits, m.invalidations, m.delayed, m.readsWaited, m.delay, m.held, m.sessions)
	}
	return m
}

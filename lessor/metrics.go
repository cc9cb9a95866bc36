package lessor

import "github.com/prometheus/client_golang/prometheus"

// metrics are the Lease API's counters. The names are the ones corenode
// has always exported (the dashboards and test/docker read them).
type metrics struct {
	grants     prometheus.Counter
	revokes    prometheus.Counter
	keepAlives prometheus.Counter
}

// newMetrics creates the counters and registers them with reg when it is
// not nil.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		grants:     prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_lease_grants_total", Help: "Lease grants served by this member."}),
		revokes:    prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_lease_revokes_total", Help: "Lease revokes served by this member."}),
		keepAlives: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_lease_keepalives_total", Help: "Keep-alives handled by this member as leader."}),
	}
	if reg != nil {
		reg.MustRegister(m.grants, m.revokes, m.keepAlives)
	}
	return m
}

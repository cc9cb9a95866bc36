package node

import (
	"strconv"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the member's raft, proposal and disk-size series (the log
// store has its own: logstore.Store.Collectors). Their names are the ones
// deploy/grafana/corenode.json charts; rename both together.
type metrics struct {
	proposals     prometheus.Counter
	proposalsFail prometheus.Counter
	applyLatency  prometheus.Histogram
	leaderChanges prometheus.Counter
	earlyAppends  prometheus.Counter
	// earlyLatency is an early append's time from the leader's offer to
	// the follower's durable answer: beside raft's leader_dispatchLog (the
	// leader's own write), how late a follower's acknowledgement comes.
	earlyLatency prometheus.Histogram
	// raftAppends counts raft's own appends that carry entries, by what
	// became of them (replication.appendEntries).
	raftAppends *prometheus.CounterVec
}

// latencyBuckets span a loopback commit (sub-millisecond) to a stalled disk.
var latencyBuckets = []float64{.0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1.024, 2.048, 4.096}

func newMetrics() *metrics {
	return &metrics{
		proposals: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_proposals_total",
			Help: "Commands this member proposed as leader."}),
		proposalsFail: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_proposals_failed_total",
			Help: "Proposals that did not commit (lost leadership, timeout, shutdown)."}),
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corenode_proposal_apply_seconds",
			Help: "Time from proposing a command to its being applied on this member.", Buckets: latencyBuckets}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_raft_leader_changes_total",
			Help: "Leader changes this member has seen."}),
		earlyAppends: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_raft_early_appends_total",
			Help: "Appends this member, as leader, sent a follower while it wrote the same entries to its own disk, and the follower took."}),
		earlyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corenode_raft_early_append_seconds",
			Help: "Time from the leader's offer of entries to a follower's sender to that follower's answer that it stored them.", Buckets: latencyBuckets}),
		raftAppends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corenode_raft_leader_appends_total",
			Help: "hashicorp/raft's appends of entries to a follower, by outcome: sent as built, trimmed (sent without the entries the follower had acknowledged from an early append), answered (every entry acknowledged: answered without a round trip)."},
			[]string{"outcome"}),
	}
}

// register adds the series, with gauges read from n at scrape time.
func (m *metrics) register(reg prometheus.Registerer, n *Node) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	boolean := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	reg.MustRegister(m.proposals, m.proposalsFail, m.applyLatency, m.leaderChanges, m.earlyAppends, m.earlyLatency, m.raftAppends,
		gauge("corenode_raft_has_leader", "1 if this member knows a leader.", func() float64 {
			_, id := n.leader()
			return boolean(id != "")
		}),
		gauge("corenode_raft_is_leader", "1 if this member is the leader.", func() float64 {
			return boolean(n.raft.State() == raft.Leader)
		}),
		gauge("corenode_raft_term", "Current raft term.", func() float64 { return float64(n.raft.CurrentTerm()) }),
		gauge("corenode_raft_commit_index", "Highest log index known committed.", func() float64 {
			v, _ := strconv.ParseUint(n.raft.Stats()["commit_index"], 10, 64)
			return float64(v)
		}),
		gauge("corenode_raft_applied_index", "Highest log index applied to the state machine.", func() float64 {
			return float64(n.raft.AppliedIndex())
		}),
		gauge("corenode_kv_db_size_bytes", "Size on disk of the raft log and its newest snapshot.", func() float64 {
			return float64(n.DiskSize())
		}),
	)
	// The log store's own: append latency, log verifications, writability.
	reg.MustRegister(n.store.Collectors()...)
}

// DiskSize is what this member keeps on disk: the raft log (raft.db, or
// the wal's segments and meta database) plus the newest snapshot, the two
// things an operator sizes the data volume for.
func (n *Node) DiskSize() int64 {
	total := n.store.Size()
	if snaps, err := n.snaps.List(); err == nil && len(snaps) > 0 {
		total += snaps[0].Size
	}
	return total
}

package node

import (
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/fsm"
)

// Config configures one member.
type Config struct {
	Name    string
	DataDir string
	// ID is this member's ID (see MemberID) unless its data dir keeps
	// another, or ResolveID gives one.
	ID uint64
	// ResolveID, when set, is asked for this member's ID when its data dir
	// holds no raft state and it joins a running cluster (Bootstrap false):
	// a member added with etcdctl member add learns the ID the cluster
	// gave it by its peer URLs. It may block on the network; an error
	// stops New.
	ResolveID func() (uint64, error)
	// PeerURLs are this member's advertised peer URLs; the first one's host:port
	// is its raft address.
	PeerURLs   []string
	ClientURLs []string
	// Transport carries raft RPCs between members.
	Transport raft.Transport
	// Fence, when set, is the one the raft stream's handshake asks
	// (transport.PeerMux.SetIdentity), made with NewFence before the
	// transport; New gives it this member's ID and incarnation before raft
	// starts. Nil: New makes one, and the handshake checks nothing.
	Fence *Fence
	// Bootstrap, when the data dir holds no raft state, starts a new cluster
	// with InitialMembers (every initial member bootstraps with the same list).
	// Without it the member waits to be added by an existing cluster.
	Bootstrap      bool
	InitialMembers []raft.Server
	// ForceNewCluster, as etcd's --force-new-cluster, restarts a member
	// whose cluster lost its quorum for good as a one-member cluster with
	// all it had: every entry of its log is applied, committed or not, and
	// the configuration becomes this member alone (recover.go). The data
	// dir must hold raft state. Meant for one start; a later start with it
	// drops the members added since.
	ForceNewCluster bool
	// InitialMembersErr says why InitialMembers could not be made; New
	// fails with it only when it would bootstrap.
	InitialMembersErr error
	// ClusterToken salts the IDs of members this member adds as leader
	// (--initial-cluster-token).
	ClusterToken string
	// StrictReconfigCheck refuses membership changes that could cost the
	// cluster its quorum, as etcd's --strict-reconfig-check (reconfig.go).
	StrictReconfigCheck bool
	// MaxLearners bounds the learners in the cluster (etcd's
	// --max-learners); zero means DefaultMaxLearners.
	MaxLearners int

	HeartbeatInterval time.Duration
	ElectionTimeout   time.Duration
	// CommitNotify is hashicorp/raft's CommitTimeout: how often a leader
	// with nothing new to send still sends every follower an empty append
	// (randomized up to twice that). Followers learn of new commits from
	// the leader's commit notifier within about a millisecond (see
	// tellCommits), so this is only the fallback, and what an idle
	// cluster spends its CPU on. Zero means 50 ms.
	CommitNotify time.Duration
	// SnapshotCount is the number of applied entries that triggers a snapshot
	// and log truncation.
	SnapshotCount uint64
	// SnapshotCatchUpEntries is how many entries the log keeps behind the
	// last one when a snapshot truncates it (raft's TrailingLogs, etcd's
	// --snapshot-catchup-entries): a follower that fell behind by fewer
	// catches up from the log rather than from a whole snapshot. Zero means
	// DefaultSnapshotCatchUpEntries, or SnapshotCount when that is lower,
	// so a member that snapshots often (as tests do) keeps a log as short
	// as its snapshot interval.
	SnapshotCatchUpEntries uint64
	// MaxSnapshots is how many snapshots the data dir keeps (etcd's
	// --max-snapshots): raft removes the oldest beyond it after each new
	// one, and the member at start. Zero means DefaultMaxSnapshots; a
	// negative count keeps every snapshot.
	MaxSnapshots int
	// SnapshotInterval is how often raft checks SnapshotCount.
	SnapshotInterval time.Duration
	// LogDir holds the raft log store; empty means DataDir.
	LogDir string
	// LogStore names the raft log store: logstore.WAL or logstore.BoltDB.
	// An existing data dir keeps the store it holds and refuses another by
	// name (logstore.MismatchError); empty means that store, or
	// logstore.Default in a new data dir.
	LogStore string
	// UnsafeNoFsync writes the raft log and raft's term and vote without
	// fsync (etcd's --unsafe-no-fsync; logstore.Config.NoSync): a machine
	// crash can lose what this member acknowledged. Snapshots are still
	// synced: raft's file snapshot store has no way to skip it.
	UnsafeNoFsync bool
	// StorageProbeInterval is how often a member that cannot persist its
	// raft state (a full disk) tries the disk again (logstore's Probe);
	// zero means 1 s.
	StorageProbeInterval time.Duration
	// LogVerifyInterval is how often the leader appends a log verification
	// checkpoint (logverify.go); zero means DefaultLogVerifyInterval.
	LogVerifyInterval time.Duration

	Logger *slog.Logger
	// RaftLog receives hashicorp/raft's own warnings in hclog's format;
	// nil sends them through Logger.
	RaftLog io.Writer
	// LeaseObserver hears lease grants and removals as they apply (the
	// leader's expiry tracker).
	LeaseObserver fsm.LeaseObserver
	// Auth is the member's auth state (its local token TTL, clock and
	// bcrypt cost); nil means auth.Config's defaults.
	Auth *auth.Store
	// Metrics, when set, registers the member's raft, proposal and disk series.
	Metrics prometheus.Registerer

	// wrapLog, in tests, wraps the raft log store under the early
	// replication hook (to hold a write and see what followers get).
	wrapLog func(raft.LogStore) raft.LogStore
}

// DefaultSnapshotCatchUpEntries is etcd's default of
// --snapshot-catchup-entries.
const DefaultSnapshotCatchUpEntries = 5000

// DefaultMaxSnapshots is etcd's default of --max-snapshots.
const DefaultMaxSnapshots = 5

// withDefaults is cfg with its zero durations and counts, and its logger,
// given their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 100 * time.Millisecond
	}
	if cfg.ElectionTimeout == 0 {
		cfg.ElectionTimeout = time.Second
	}
	if cfg.CommitNotify == 0 {
		cfg.CommitNotify = 50 * time.Millisecond
	}
	if cfg.SnapshotCount == 0 {
		cfg.SnapshotCount = 10000
	}
	if cfg.SnapshotCatchUpEntries == 0 {
		cfg.SnapshotCatchUpEntries = min(cfg.SnapshotCount, DefaultSnapshotCatchUpEntries)
	}
	if cfg.MaxSnapshots == 0 {
		cfg.MaxSnapshots = DefaultMaxSnapshots
	}
	if cfg.SnapshotInterval == 0 {
		cfg.SnapshotInterval = 30 * time.Second
	}
	if cfg.LogVerifyInterval == 0 {
		cfg.LogVerifyInterval = DefaultLogVerifyInterval
	}
	return cfg
}

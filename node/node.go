package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/internal/round"
	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lessor"
	"github.com/corenode/corenode/logstore"
)

// TermProber asks another member for its current raft term, the seam
// through which a leader confirms it still leads (see ReadBarrier).
//
// Term is called concurrently, for as many voters as each confirmation
// round needs (a quorum's worth, the quickest first; more when one fails or
// is slow, see probe.go).
// Each call must send a new request, made after the call began, and never
// answer from a cache or from a reply to an earlier request: the answer
// counts as that member's word after the round began. The caller stops
// waiting when ctx ends; a call may go on after that (heartbeatProber's
// until the raft transport's I/O timeout), and its answer is then dropped.
//
// A node probes with raft heartbeats (heartbeatProber) unless
// SetTermProber replaces that.
type TermProber interface {
	Term(ctx context.Context, addr raft.ServerAddress) (uint64, error)
}

// Node is one running member's raft: the raft.Raft instance over its log
// store and FSM, its proposals, leadership and membership.
type Node struct {
	cfg Config
	log *slog.Logger
	fsm *fsm.FSM
	// applier is fsm as raft sees it (replay.go).
	applier *applier
	raft    *raft.Raft
	// store is the raft log and stable store; health says whether it can
	// be written (package logstore).
	store  *logstore.Store
	health *logstore.Health
	snaps  *snapshotStore
	logs   raft.LogStore
	// termStore is where checkAppend reads raft's current term: the
	// stable store (store, outside tests).
	termStore raft.StableStore
	// verifier checks the log against the leader's checkpoints (logstore/verify.go).
	verifier *logstore.Verifier
	// fence keeps out members of another history (fence.go).
	fence *Fence
	repl  *replication
	// metrics are always collected; cfg.Metrics decides whether anyone sees them.
	metrics *metrics
	obs     *raft.Observer
	obsCh   chan raft.Observation

	// early is the current leadership term's early replication (nil when
	// not leading); the log store offers it the leader's new entries.
	early atomic.Pointer[earlyReplication]

	// readyTerm is the term in which this member, as leader, has applied all
	// earlier entries; linearizable reads wait for it.
	readyTerm atomic.Uint64

	// confirmRounds shares leadership confirmations among ReadBarrier's
	// callers (verifyOnce).
	confirmRounds *round.Group[struct{}]
	rmu           sync.Mutex // guards prober
	prober        TermProber
	amu           sync.Mutex // guards ages
	ages          PeerAges
	// clusterTime says since when this member has had a leader (clusterage.go).
	clusterTime clusterTime
	probes      probeStats // how quickly each voter answered the prober

	smu      sync.Mutex
	services []LeaderService
	gate     atomic.Pointer[Gate]

	notify       chan bool
	removed      chan struct{}
	leaderChange signal
	// joined is set once this member has seen itself in raft's
	// configuration (removal.go).
	joined atomic.Bool
	// membersChanged is notified when this member, as leader, changed the
	// membership (reconfig.go): the promoter and the commit tellers look
	// at the configuration again.
	membersChanged signal
	// ready is notified whenever readyTerm changes.
	ready signal
	// caughtUp is closed once the FSM holds what this member had applied
	// before it started (catchup.go); start is the log's end then.
	caughtUp    chan struct{}
	start       logPosition
	removedOnce sync.Once
	startOnce   sync.Once
	stop        chan struct{}
	done        sync.WaitGroup
	closeErr    error
	closed      sync.Once

	// forcedNewCluster is set when this start forced a new one-member
	// cluster from the member's data (Config.ForceNewCluster, recover.go).
	// A cluster incarnation minted by the first leader must be minted anew
	// then, so that the dropped members' old data dirs are refused.
	forcedNewCluster bool
}

// New opens the data dir, restores state and starts raft.
func New(cfg Config) (_ *Node, err error) {
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("node: data dir: %w", err)
	}
	n := &Node{cfg: cfg, log: cfg.Logger, fsm: fsm.New(cfg.Logger, cfg.LeaseObserver, cfg.Auth), stop: make(chan struct{}), metrics: newMetrics(),
		removed: make(chan struct{})}
	n.confirmRounds = round.New(func() (struct{}, error) { return struct{}{}, n.verifyOnce() })

	store, err := logstore.Open(logstore.Config{DataDir: cfg.DataDir, LogDir: cfg.LogDir, Kind: cfg.LogStore, ID: cfg.ID, Logger: cfg.Logger,
		WALLogger: raftLogger(cfg, "wal"), ProbeInterval: cfg.StorageProbeInterval, NoSync: cfg.UnsafeNoFsync})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if cfg.UnsafeNoFsync {
		n.log.Warn("--unsafe-no-fsync: the raft log is written without fsync; unsafe, will cause data loss "+
			"if the machine crashes or loses power (writes this member acknowledged, and its agreement with the others)",
			"log-store", store.Kind())
	}
	// Until New returns the node, a failure undoes what it opened and
	// started, the latest first.
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	undo = append(undo, func() { store.Close() })
	n.store, n.health = store, store.Health()
	snaps, err := openSnapshots(cfg.DataDir, snapshotsRetained(cfg.MaxSnapshots), cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("node: open snapshot store: %w", err)
	}
	n.snaps = snaps
	if err := checkSnapshotCoversLog(store, snaps); err != nil {
		return nil, fmt.Errorf("node: %w", &logstore.CorruptError{DataDir: cfg.DataDir, LogDir: cfg.LogDir, Store: store.Kind(), ID: cfg.ID, Err: err})
	}
	has, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return nil, fmt.Errorf("node: inspect raft state: %w", err)
	}
	if cfg.ForceNewCluster && !has {
		return nil, fmt.Errorf("%w (%s)", ErrNoStateToRecover, cfg.DataDir)
	}
	if cfg.Bootstrap && !has && cfg.InitialMembersErr != nil {
		return nil, cfg.InitialMembersErr
	}
	id, err := settleID(store, has, cfg)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if id != cfg.ID {
		n.log.Info("this member's ID is the one its data dir keeps or the cluster gave it", "id", fmt.Sprintf("%x", id))
	}
	n.cfg.ID, cfg.ID = id, id
	if err := n.setUpFence(); err != nil {
		return nil, err
	}
	n.verifier = store.Verifier(id)
	undo = append(undo, n.verifier.Close)
	logs, err := raft.NewLogCache(1024, n.verifier)
	n.logs = logs
	if err != nil {
		return nil, fmt.Errorf("node: log cache: %w", err)
	}
	notify := make(chan bool, 16)
	rc := raftConfig(cfg, notify)
	// raft writes through these, so that a failed write marks the member
	// unable to persist (logstore.Health); n.logs, for reads, skips them.
	var raftLogs raft.LogStore = n.health.Guard(logs)
	if cfg.wrapLog != nil {
		raftLogs = cfg.wrapLog(raftLogs)
	}
	// Outermost: a batch is offered to the followers before it is written.
	raftLogs = earlyLogStore{raftLogs, n}
	stable := n.health.Stable(store, n.stop)

	// An acknowledgement answers raft's append for up to a heartbeat
	// interval (raft takes the answer as contact with the follower); raft's
	// append waits up to half a heartbeat timeout for an early append on
	// the wire, well inside the leader lease.
	n.repl = newReplication(cfg.Transport, n.health, n.metrics, cfg.HeartbeatInterval, rc.HeartbeatTimeout/2)
	n.termStore = store
	n.repl.checkAppend = n.checkAppend
	n.repl.heartbeatDeadline = cfg.ElectionTimeout

	if cfg.ForceNewCluster {
		rec, err := n.forceNewCluster(rc, raftLogs, stable, snaps, n.repl)
		if err != nil {
			return nil, err
		}
		n.forcedNewCluster = true
		n.log.Warn("forced a new one-member cluster from this member's data (--force-new-cluster)",
			"replayed-entries", rec.replayed, "after-snapshot", rec.snapshotIndex, "through-index", rec.lastIndex,
			"dropped-members", hexIDs(rec.dropped), "cleared-alarms", rec.alarms, "was-a-member", rec.selfWasIn,
			"id", fmt.Sprintf("%x", id))
		n.log.Warn("--force-new-cluster is meant for one start: remove it from this member's flags now; " +
			"every start with it forces a one-member cluster again, dropping the members added since")
	} else if cfg.Bootstrap && !has {
		if err := raft.BootstrapCluster(rc, raftLogs, stable, snaps, n.repl,
			raft.Configuration{Servers: cfg.InitialMembers}); err != nil {
			return nil, fmt.Errorf("node: bootstrap: %w", err)
		}
		n.log.Info("bootstrapped new cluster", "members", len(cfg.InitialMembers))
	}

	// After a bootstrap (its configuration is entry 1), before raft starts
	// (a leader's appends may reach it at once).
	if n.start, err = lastEntry(n.logs); err != nil {
		return nil, fmt.Errorf("node: read the log's last entry: %w", err)
	}
	if n.start.index == 0 {
		if metas, err := snaps.List(); err == nil && len(metas) == 0 {
			n.start = joining
		}
	}
	n.caughtUp = make(chan struct{})
	if n.start.index == 0 {
		close(n.caughtUp) // a snapshot and no log after it: all it had
	} else {
		n.repl.watchAnswers.Store(true)
	}
	markFile, mark, err := openCommitMark(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.applier = &applier{FSM: n.fsm, log: n.log, mark: markFile}
	undo = append(undo, n.applier.close)
	if n.applier.marked, err = n.checkMark(mark); err != nil {
		return nil, fmt.Errorf("node: check the commit mark: %w", err)
	}
	// From here on raft's main goroutine may write its term, which must
	// not fail (logstore.Stable).
	stable.Running()
	r, err := raft.NewRaft(rc, n.applier, raftLogs, stable, snaps, n.repl)
	if err != nil {
		return nil, fmt.Errorf("node: start raft: %w", err)
	}
	undo = append(undo, func() { r.Shutdown() })
	stable.Campaigning(func() bool { return r.State() == raft.Candidate })
	n.raft = r
	n.fence.mu.Lock()
	n.fence.voters = func() []uint64 { ids, _ := n.VoterIDs(); return ids }
	n.fence.mu.Unlock()
	through, err := n.knownCommitted(n.applier.marked)
	if err != nil {
		return nil, fmt.Errorf("node: replay the committed log: %w", err)
	}
	if err := n.replay(through); err != nil {
		return nil, fmt.Errorf("node: replay the committed log: %w", err)
	}
	if n.start.index > 0 && n.start != joining && n.appliedThrough(n.start.index) {
		// The replay reached the log's end: nothing left to catch up on.
		close(n.caughtUp)
		n.repl.watchAnswers.Store(false)
	}
	n.services = append(n.services, checkpointer{n}, promoter{n})
	n.prober = heartbeatProber{n}
	n.notify = notify
	in, known := n.inConfiguration()
	n.joined.Store(in && known)
	if known && !in {
		return nil, ErrRemoved
	}
	// Observations only wake the notifier, which then reads the leader from
	// raft itself (raft sets its state before it observes). raft drops an
	// observation rather than block when the channel is full, and then the
	// ones still queued wake the notifier after the change: none is lost.
	// State observations count too: a candidate's leader is cleared by
	// Leader(), not by a LeaderObservation.
	n.obsCh = make(chan raft.Observation, 16)
	n.obs = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	r.RegisterObserver(n.obs)
	if cfg.Metrics != nil {
		n.metrics.register(cfg.Metrics, n)
	}
	return n, nil
}

// Start begins reacting to leadership: until it is called, leadership
// notifications wait in a buffer, so services added with AddLeaderService
// before Start see every term, even one won during New.
func (n *Node) Start() {
	n.startOnce.Do(func() {
		n.done.Add(4)
		go n.watchLeadership(n.notify)
		go n.watchRemoval()
		go n.followLeader(n.obsCh)
		go func() {
			defer n.done.Done()
			n.store.Probe(n.stop)
		}()
		select {
		case <-n.caughtUp:
		default:
			n.done.Add(1)
			go n.awaitCatchUp(n.start)
		}
	})
}

// LogStore is the log store this member opened (logstore.WAL or
// logstore.BoltDB), which its data dir now keeps.
func (n *Node) LogStore() string { return n.store.Kind() }

// Close stops raft and closes the stores. If this member leads, it first
// tries to hand leadership over so clients see no election timeout.
func (n *Node) Close() error {
	n.closed.Do(func() {
		close(n.stop)
		if n.raft.State() == raft.Leader && n.voters() > 1 {
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				n.log.Warn("leadership transfer before stop failed", "err", err)
			}
		}
		n.raft.DeregisterObserver(n.obs)
		if err := n.raft.Shutdown().Error(); err != nil {
			n.closeErr = fmt.Errorf("node: raft shutdown: %w", err)
		}
		n.done.Wait()
		n.verifier.Close()
		n.applier.close()
		if err := n.store.Close(); err != nil && n.closeErr == nil {
			n.closeErr = fmt.Errorf("node: close raft log: %w", err)
		}
	})
	return n.closeErr
}

func (n *Node) voters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// SetTermProber replaces the node's way to ask other members for their
// term, which ReadBarrier needs, and returns the one it replaces.
func (n *Node) SetTermProber(p TermProber) (previous TermProber) {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	previous, n.prober = n.prober, p
	return previous
}

// FSM is the member's state machine, for reads and watches.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// Store is the member's kv state, for reads and watches.
func (n *Node) Store() *kv.Store { return n.fsm.Store() }

// ID is this member's ID.
func (n *Node) ID() uint64 { return n.cfg.ID }

// Name is this member's name.
func (n *Node) Name() string { return n.cfg.Name }

// ClusterID is the replicated cluster ID (zero before the first entry applies).
func (n *Node) ClusterID() uint64 { return n.fsm.ClusterID() }

// Raft exposes raft indexes and stats for status reporting.
func (n *Node) Raft() *raft.Raft { return n.raft }

// ErrNotLeader is returned by leader-only calls on a follower; the caller
// forwards the request to the leader. It is lessor.ErrNotLeader, corenode's
// one "not the leader" error, so every layer's refusal is the same value.
var ErrNotLeader = lessor.ErrNotLeader

// ErrLeaderChanged means a proposal was accepted by a leader that lost its
// leadership (or began handing it over) before the entry committed: it may
// or may not apply, as with etcd's "leader changed".
var ErrLeaderChanged = errors.New("node: leader changed before the proposal committed")

// ErrStopped means the member is shutting down.
var ErrStopped = errors.New("node: member stopped")

// ErrTimeout means a proposal could not be queued, or a leadership
// confirmation could not finish, within the election timeout.
var ErrTimeout = errors.New("node: request timed out")

// RestoredIndex is the raft index of the snapshot WriteRestoredSnapshot
// writes; the state in it must be as of this index.
const RestoredIndex = 1

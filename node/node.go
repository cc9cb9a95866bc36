// Package node is the composition root of one corenode member: it owns the
// raft.Raft instance and its stores, the FSM, the single proposal pipeline,
// the reaction to leadership changes, and the linearizable-read barrier.
//
// Everything that changes replicated state goes through Propose, so gates
// that must see every write (such as read leases, later) have one place to
// live.
package node

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
)

// Config configures one member.
type Config struct {
	Name    string
	DataDir string
	// ID is this member's ID; see MemberID.
	ID uint64
	// PeerURLs are this member's advertised peer URLs; the first one's host:port
	// is its raft address.
	PeerURLs   []string
	ClientURLs []string
	// Transport carries raft RPCs between members.
	Transport raft.Transport
	// Bootstrap, when the data dir holds no raft state, starts a new cluster
	// with InitialMembers (every initial member bootstraps with the same list).
	// Without it the member waits to be added by an existing cluster.
	Bootstrap      bool
	InitialMembers []raft.Server

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
	// SnapshotInterval is how often raft checks SnapshotCount.
	SnapshotInterval time.Duration
	// LogStore names the raft log store: LogStoreWAL or LogStoreBoltDB. An
	// existing data dir keeps the store it holds and refuses another by
	// name (MismatchError); empty means that store, or DefaultLogStore in a
	// new data dir.
	LogStore string

	Logger *slog.Logger
	// RaftLog receives hashicorp/raft's own warnings; nil means stderr.
	RaftLog io.Writer
	// LeaseObserver hears lease grants and removals as they apply (the
	// leader's expiry tracker).
	LeaseObserver fsm.LeaseObserver
	// Metrics, when set, registers the member's raft, proposal and disk series.
	Metrics prometheus.Registerer

	// wrapLog, in tests, wraps the raft log store under the early
	// replication hook (to hold a write and see what followers get).
	wrapLog func(raft.LogStore) raft.LogStore
}

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

// LeaderService is leader-only machinery. Run is started after the new
// leader has applied every entry of earlier terms (a barrier), so it never
// acts on a stale FSM, and ctx is cancelled the moment leadership is lost.
// Run must return promptly after ctx is done.
type LeaderService interface {
	Run(ctx context.Context, term uint64)
}

// Gate holds a leader's commands back until they may change state. The
// read-lease manager is one: a write to a key under read leases waits until
// no holder can still serve the old value.
//
// Admit is called on the leader for every command, from any number of
// goroutines at once, before the command is handed to raft. It returns once
// the command may be proposed, or with an error (ctx's, or one for the
// client) and then the command is not proposed. If it returns nil error,
// release is called exactly once: after the command applied on this member,
// or after its proposal failed (then it may still commit under a later
// leader, whose own gate admits nothing before every earlier promise ran
// out).
type Gate interface {
	Admit(ctx context.Context, op fsm.Op, data []byte) (release func(), err error)
}

// Node is one running member.
type Node struct {
	cfg   Config
	log   *slog.Logger
	fsm   *fsm.FSM
	raft  *raft.Raft
	store logStore
	// storeKind is the store this member opened (LogStoreWAL or LogStoreBoltDB).
	storeKind string
	snaps     *snapshotStore
	logs      raft.LogStore
	repl      *replication
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

	rmu       sync.Mutex
	nextRead  *readBatch
	verifying bool
	prober    TermProber
	probes    probeStats // how quickly each voter answered the prober

	smu      sync.Mutex
	services []LeaderService
	gate     atomic.Pointer[Gate]

	notify       chan bool
	removed      chan struct{}
	leaderChange signal
	// ready is notified whenever readyTerm changes.
	ready       signal
	removedOnce sync.Once
	startOnce   sync.Once
	stop        chan struct{}
	done        sync.WaitGroup
	closeErr    error
	closed      sync.Once
}

// MemberID derives a member's ID from its peer URLs and the cluster token, as
// etcd does, so a member started to join an existing cluster knows its own ID
// without asking anyone.
func MemberID(peerURLs []string, token string) uint64 {
	urls := slices.Clone(peerURLs)
	slices.Sort(urls)
	h := sha256.New()
	for _, u := range urls {
		h.Write([]byte(u))
		h.Write([]byte{0})
	}
	h.Write([]byte(token))
	id := binary.BigEndian.Uint64(h.Sum(nil)[:8])
	if id == 0 { // zero means "none" in the etcd API
		id = 1
	}
	return id
}

// ServerID is the raft server ID of a member ID.
func ServerID(id uint64) raft.ServerID { return raft.ServerID(strconv.FormatUint(id, 16)) }

// ParseServerID is the inverse of ServerID.
func ParseServerID(s raft.ServerID) (uint64, error) {
	return strconv.ParseUint(string(s), 16, 64)
}

// New opens the data dir, restores state and starts raft.
func New(cfg Config) (*Node, error) {
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
	if cfg.SnapshotInterval == 0 {
		cfg.SnapshotInterval = 30 * time.Second
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("node: data dir: %w", err)
	}
	n := &Node{cfg: cfg, log: cfg.Logger, fsm: fsm.New(cfg.Logger, cfg.LeaseObserver), stop: make(chan struct{}), metrics: newMetrics(),
		removed: make(chan struct{})}

	kind, err := chooseLogStore(cfg.DataDir, cfg.LogStore)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	stores, err := openLogStore(cfg.DataDir, kind, raftLogger(cfg, "wal"))
	if err != nil {
		if c := (*CorruptLogError)(nil); errors.As(err, &c) {
			c.ID = cfg.ID
			return nil, fmt.Errorf("node: %w", c)
		}
		return nil, fmt.Errorf("node: open %s raft log in %s: %w", kind, cfg.DataDir, err)
	}
	n.store, n.storeKind = stores, kind
	snaps, err := openSnapshots(cfg.DataDir, 2, cfg.Logger)
	if err != nil {
		stores.Close()
		return nil, fmt.Errorf("node: open snapshot store: %w", err)
	}
	n.snaps = snaps
	logs, err := raft.NewLogCache(1024, timedLogStore{stores, n.metrics.fsync})
	n.logs = logs
	if err != nil {
		stores.Close()
		return nil, fmt.Errorf("node: log cache: %w", err)
	}

	n.repl = newReplication(cfg.Transport, n.metrics)
	notify := make(chan bool, 16)
	rc := raftConfig(cfg, notify)

	if cfg.Bootstrap {
		has, err := raft.HasExistingState(logs, stores, snaps)
		if err != nil {
			stores.Close()
			return nil, fmt.Errorf("node: inspect raft state: %w", err)
		}
		if !has {
			if err := raft.BootstrapCluster(rc, logs, stores, snaps, n.repl,
				raft.Configuration{Servers: cfg.InitialMembers}); err != nil {
				stores.Close()
				return nil, fmt.Errorf("node: bootstrap: %w", err)
			}
			n.log.Info("bootstrapped new cluster", "members", len(cfg.InitialMembers))
		}
	}

	var store raft.LogStore = logs
	if cfg.wrapLog != nil {
		store = cfg.wrapLog(store)
	}
	r, err := raft.NewRaft(rc, n.fsm, earlyLogStore{store, n}, stores, snaps, n.repl)
	if err != nil {
		stores.Close()
		return nil, fmt.Errorf("node: start raft: %w", err)
	}
	n.raft = r
	n.prober = heartbeatProber{n}
	n.notify = notify
	if in, known := n.inConfiguration(); known && !in {
		r.Shutdown()
		stores.Close()
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
		n.done.Add(3)
		go n.watchLeadership(n.notify)
		go n.watchRemoval()
		go n.countLeaderChanges(n.obsCh)
	})
}

// LogStore is the log store this member opened (LogStoreWAL or
// LogStoreBoltDB), which its data dir now keeps.
func (n *Node) LogStore() string { return n.storeKind }

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

// AddLeaderService registers machinery that runs only while this member
// leads. Register before Start for it to see every term.
func (n *Node) AddLeaderService(s LeaderService) {
	n.smu.Lock()
	n.services = append(n.services, s)
	n.smu.Unlock()
}

// watchLeadership turns raft's leadership notifications into the leader
// term's lifetime: barrier first, then leader services, all cancelled on loss.
func (n *Node) watchLeadership(notify <-chan bool) {
	defer n.done.Done()
	var cancel context.CancelFunc
	var wg sync.WaitGroup
	stepDown := func() {
		n.readyTerm.Store(0)
		n.ready.Notify()
		if cancel != nil {
			cancel()
			wg.Wait()
			cancel = nil
		}
	}
	defer stepDown()
	for {
		select {
		case <-n.stop:
			return
		case leader := <-notify:
			stepDown()
			if !leader {
				n.log.Info("lost leadership")
				continue
			}
			ctx, stop := context.WithCancel(context.Background())
			cancel = stop
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.lead(ctx)
			}()
		}
	}
}

func (n *Node) lead(ctx context.Context) {
	term := n.raft.CurrentTerm()
	for {
		// The barrier applies every entry of earlier terms on this member,
		// so reads and leader services see everything ever acknowledged.
		err := n.raft.Barrier(n.cfg.ElectionTimeout * 5).Error()
		if err == nil {
			break
		}
		if ctx.Err() != nil || n.raft.State() != raft.Leader {
			return
		}
		n.log.Warn("leader barrier failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	if n.raft.CurrentTerm() != term {
		return
	}
	n.readyTerm.Store(term)
	n.ready.Notify()
	n.log.Info("leading", "term", term, "applied", n.raft.AppliedIndex())
	n.smu.Lock()
	services := slices.Clone(n.services)
	n.smu.Unlock()
	var wg sync.WaitGroup
	e := newEarlyReplication(term)
	n.early.Store(e)
	defer n.early.CompareAndSwap(e, nil)
	wg.Add(1)
	go func() {
		defer wg.Done()
		n.serveFollowers(ctx, term, e)
	}()
	for _, s := range services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Run(ctx, term)
		}()
	}
	wg.Wait()
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

// Term is the current raft term.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// IsLeader reports whether this member is the raft leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// ReadyChange returns a channel closed at the next change of whether this
// member, as leader, has applied every entry of earlier terms (the
// barrier that starts each term): a caller that found the leader not
// ready yet waits on it, after taking it and before looking again.
func (n *Node) ReadyChange() <-chan struct{} { return n.ready.Wait() }

// Ready reports whether this member leads and has applied every entry of
// earlier terms.
func (n *Node) Ready() bool {
	t := n.readyTerm.Load()
	return t != 0 && t == n.raft.CurrentTerm() && n.raft.State() == raft.Leader
}

// Leader returns the current leader's member ID and raft (peer) address, or
// zero and "" when there is none known.
func (n *Node) Leader() (uint64, string) {
	addr, sid := n.leader()
	if sid == "" {
		return 0, ""
	}
	id, err := ParseServerID(sid)
	if err != nil {
		return 0, ""
	}
	return id, string(addr)
}

// leader is raft's leader, except that a candidate has none. raft 1.7 keeps
// the leader it last heard from on a candidate that a leadership transfer
// started (the old leader's appends reach it while it campaigns, and do not
// turn it back into a follower), so after that leader stops, raft would
// name it for as long as the election goes on.
func (n *Node) leader() (raft.ServerAddress, raft.ServerID) {
	addr, sid := n.raft.LeaderWithID()
	if n.raft.State() == raft.Candidate {
		return "", ""
	}
	return addr, sid
}

// Raft exposes raft indexes and stats for status reporting.
func (n *Node) Raft() *raft.Raft { return n.raft }

// ErrNotLeader is returned by leader-only calls on a follower; the caller
// forwards the request to the leader.
var ErrNotLeader = errors.New("node: not the leader")

// Propose replicates one command and returns the FSM's response once the
// entry is committed on a quorum (fsynced) and applied on this member. It is
// the only way replicated state changes.
//
// A proposal cannot be withdrawn once handed to raft: if ctx ends first the
// caller stops waiting, but the command may still commit. The wait itself is
// bounded: a leader that loses its quorum steps down after the leader lease
// timeout and fails every pending future.
func (n *Node) Propose(ctx context.Context, op fsm.Op, msg fsm.Message) (any, error) {
	if n.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	data, err := fsm.Encode(op, msg)
	if err != nil {
		return nil, err
	}
	return n.propose(ctx, op, data)
}

// ProposeEncoded is Propose for a command a follower already encoded with
// fsm.Encode and forwarded; the FSM validates it again when it applies.
func (n *Node) ProposeEncoded(ctx context.Context, data []byte) (any, error) {
	if n.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	if len(data) < 2 {
		return nil, fmt.Errorf("node: forwarded command of %d bytes is too short", len(data))
	}
	return n.propose(ctx, fsm.Op(data[1]), data)
}

// SetGate installs the gate every proposal passes (nil: none). Set it
// before Start.
func (n *Node) SetGate(g Gate) {
	if g == nil {
		n.gate.Store(nil)
		return
	}
	n.gate.Store(&g)
}

func (n *Node) propose(ctx context.Context, op fsm.Op, data []byte) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if g := n.gate.Load(); g != nil {
		release, err := (*g).Admit(ctx, op, data)
		if err != nil {
			return nil, err
		}
		// raft's future resolves only once the entry applied here or the
		// proposal failed (leadership lost, shutdown): Gate's contract.
		defer release()
	}
	start := time.Now()
	n.metrics.proposals.Inc()
	f := n.raft.Apply(data, n.cfg.ElectionTimeout)
	if err := f.Error(); err != nil {
		n.metrics.proposalsFail.Inc()
		switch {
		case errors.Is(err, raft.ErrNotLeader):
			return nil, ErrNotLeader
		case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return nil, rpctypes.ErrGRPCLeaderChanged
		case errors.Is(err, raft.ErrRaftShutdown):
			return nil, rpctypes.ErrGRPCStopped
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return nil, rpctypes.ErrGRPCTimeout
		}
		return nil, fmt.Errorf("node: propose %s: %w", op, err)
	}
	n.metrics.applyLatency.Observe(time.Since(start).Seconds())
	res, ok := f.Response().(fsm.Result)
	if !ok {
		return nil, fmt.Errorf("node: propose %s: unexpected apply result %T", op, f.Response())
	}
	return res.Resp, res.Err
}

// ReadIndex returns, on the leader, an index such that any member whose
// FSM has applied it (fsm.FSM.WaitApplied) holds every write acknowledged
// before the call began, and every write any member has applied when the
// call began. It confirms leadership first (ReadBarrier), then takes the
// commit index: the leader's own FSM may still be applying it, so the leader
// waits for it too.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	if err := n.ReadBarrier(ctx); err != nil {
		return 0, err
	}
	return n.stateIndex(n.raft.CommitIndex()), nil
}

// stateIndex maps a log index to the last entry at or before it that
// reaches the FSM: raft's no-op, barrier and similar entries change no state
// and never reach it, so waiting for them would wait for the next write.
// They are rare (a few per term); past maxScan of them in a row, or where
// the log is compacted, the leader's FSM index serves.
func (n *Node) stateIndex(commit uint64) uint64 {
	const maxScan = 1024
	var l raft.Log
	for i := commit; i > 0 && commit-i < maxScan; i-- {
		if err := n.logs.GetLog(i, &l); err != nil {
			break
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return i
		}
	}
	return n.fsm.Applied()
}

type readBatch struct {
	done chan struct{}
	err  error
}

// ReadBarrier returns once a read of this member's state, made after it
// returns, is linearizable: this member is the leader of the current term,
// has applied every entry of earlier terms, and a quorum has confirmed its
// leadership after the call began. Every write acknowledged before the call
// began was applied on the leader before it was acknowledged, so the local
// state includes it.
//
// Concurrent callers share one leadership confirmation: a caller joins the
// next round that has not started yet, never one already in flight (that
// round's questions may predate the caller, and a newer leader could have
// acknowledged writes since).
func (n *Node) ReadBarrier(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	n.rmu.Lock()
	if n.nextRead == nil {
		n.nextRead = &readBatch{done: make(chan struct{})}
	}
	b := n.nextRead
	if !n.verifying {
		n.verifying = true
		go n.verifyRounds()
	}
	n.rmu.Unlock()
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Node) verifyRounds() {
	for {
		n.rmu.Lock()
		b := n.nextRead
		n.nextRead = nil
		if b == nil {
			n.verifying = false
			n.rmu.Unlock()
			return
		}
		n.rmu.Unlock()
		b.err = n.verifyOnce()
		close(b.done)
	}
}

func (n *Node) verifyOnce() error {
	term := n.raft.CurrentTerm()
	if n.readyTerm.Load() != term {
		// A fresh leader that has not applied its predecessors' entries yet
		// cannot answer; wait briefly for its barrier rather than fail.
		deadline := time.NewTimer(n.cfg.ElectionTimeout)
		defer deadline.Stop()
		for {
			ready, changed := n.ready.Wait(), n.leaderChange.Wait()
			if n.readyTerm.Load() == n.raft.CurrentTerm() {
				break
			}
			if n.raft.State() != raft.Leader {
				return ErrNotLeader
			}
			select {
			case <-ready:
			case <-changed:
			case <-deadline.C:
				return rpctypes.ErrGRPCTimeout
			}
		}
		term = n.raft.CurrentTerm()
	}
	if err := n.confirmTerm(term); err != nil {
		return err
	}
	if n.raft.CurrentTerm() != term || n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	return nil
}

// confirmTerm returns nil once a quorum of voters, asked after the call
// began, say they are still in term. A leader of a later term needs votes
// from a quorum, which shares a member with this one, and that member moved
// to the later term before it voted; so no later leader existed, or could
// have acknowledged a write, before the call began. It asks only as many
// voters as a quorum needs, the quickest first, and the others when one
// fails or is slow (probe.go).
//
// raft's VerifyLeader is not enough: it counts any successful replication
// or heartbeat answer that arrives after it was called, including answers
// to requests sent long before. A leader resuming from a pause (SIGSTOP, a
// stalled VM) reads a follower's buffered answer from before the pause,
// "confirms" a leadership it lost meanwhile, and serves a stale read;
// jepsen-lite caught exactly that.
func (n *Node) confirmTerm(term uint64) error {
	n.rmu.Lock()
	prober := n.prober
	n.rmu.Unlock()
	if prober == nil {
		return errors.New("node: leadership check before SetTermProber")
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("node: read configuration: %w", err)
	}
	self := ServerID(n.cfg.ID)
	var others []raft.Server
	voters, have := 0, 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if s.ID == self {
			have++
		} else {
			others = append(others, s)
		}
	}
	need := voters/2 + 1
	if have >= need {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ElectionTimeout)
	defer cancel()
	type answer struct {
		id   raft.ServerID
		term uint64 // 0: no word from this member
		took time.Duration
	}
	answers := make(chan answer, len(others))
	order := n.probes.order(others)
	asked := 0
	waiting := map[raft.ServerID]bool{}
	ask := func() {
		s := order[asked]
		asked++
		waiting[s.ID] = true
		go func() {
			start := time.Now()
			t, err := prober.Term(ctx, s.Address)
			if err != nil {
				t = 0
			}
			answers <- answer{s.ID, t, time.Since(start)}
		}()
	}
	// Ask as many as a quorum needs; the rest on a failure or the hedge.
	for asked < min(need-have, len(order)) {
		ask()
	}
	hedge := time.NewTimer(n.probes.hedge(order[:asked]))
	defer hedge.Stop()
	for len(waiting) > 0 || asked < len(order) {
		select {
		case a := <-answers:
			delete(waiting, a.id)
			switch {
			case a.term > term:
				return ErrNotLeader
			case a.term == term:
				n.probes.answered(a.id, a.took)
				if have++; have >= need {
					return nil
				}
			default: // no word (or, from a prober other than raft's, an older term)
				n.probes.failed(a.id)
				if asked < len(order) {
					ask()
				}
			}
		case <-hedge.C:
			for id := range waiting {
				n.probes.failed(id) // slow: asked last next time
			}
			for asked < len(order) {
				ask()
			}
		case <-ctx.Done():
			return ErrNotLeader
		}
	}
	// Too few members answered to tell; raft steps this member down if
	// that lasts (LeaderLeaseTimeout), and callers retry meanwhile.
	return ErrNotLeader
}

// Members lists the cluster's members: raft's configuration joined with what
// each member published about itself.
func (n *Node) Members() ([]*pb.Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("node: read configuration: %w", err)
	}
	var out []*pb.Member
	for _, s := range f.Configuration().Servers {
		id, err := ParseServerID(s.ID)
		if err != nil {
			continue
		}
		m := &pb.Member{ID: id, IsLearner: s.Suffrage != raft.Voter}
		if pm := n.fsm.Member(id); pm != nil {
			m.Name, m.ClientURLs, m.PeerURLs = pm.Name, pm.ClientURLs, pm.PeerURLs
		}
		if len(m.PeerURLs) == 0 {
			m.PeerURLs = []string{n.peerScheme() + "://" + string(s.Address)}
		}
		out = append(out, m)
	}
	return out, nil
}

func (n *Node) peerScheme() string {
	if len(n.cfg.PeerURLs) > 0 && strings.HasPrefix(n.cfg.PeerURLs[0], "https://") {
		return "https"
	}
	return "http"
}

// Self is what this member publishes about itself.
func (n *Node) Self() *pb.Member {
	return &pb.Member{ID: n.cfg.ID, Name: n.cfg.Name, PeerURLs: n.cfg.PeerURLs, ClientURLs: n.cfg.ClientURLs}
}

// AddMember adds a voting member with the given peer URLs and returns it.
// Leader only.
func (n *Node) AddMember(peerURLs []string, id uint64, addr string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if err := n.raft.AddVoter(ServerID(id), raft.ServerAddress(addr), 0, 10*n.cfg.ElectionTimeout).Error(); err != nil {
		return fmt.Errorf("node: add member %x: %w", id, err)
	}
	return nil
}

// RemoveMember removes a member. Leader only.
func (n *Node) RemoveMember(id uint64) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if err := n.raft.RemoveServer(ServerID(id), 0, 10*n.cfg.ElectionTimeout).Error(); err != nil {
		return fmt.Errorf("node: remove member %x: %w", id, err)
	}
	return nil
}

// TransferLeadership hands leadership to member id. Leader only. Moving it
// to the leader itself succeeds at once, so a retried move is harmless.
func (n *Node) TransferLeadership(id uint64) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if id == n.cfg.ID {
		return nil
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("node: read configuration: %w", err)
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == ServerID(id) {
			if err := n.raft.LeadershipTransferToServer(s.ID, s.Address).Error(); err != nil {
				return fmt.Errorf("node: transfer leadership to %x: %w", id, err)
			}
			return nil
		}
	}
	return rpctypes.ErrGRPCMemberNotFound
}

// OpenSnapshot returns a consistent snapshot of the state machine as of a
// recent applied index: raft takes a fresh snapshot (which also compacts the
// log), or, when nothing was applied since the last one, that one serves.
// The caller closes the reader.
func (n *Node) OpenSnapshot() (*raft.SnapshotMeta, io.ReadCloser, error) {
	f := n.raft.Snapshot()
	if err := f.Error(); err == nil {
		return f.Open()
	} else if !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil, nil, fmt.Errorf("node: take snapshot: %w", err)
	}
	metas, err := n.snaps.List()
	if err != nil {
		return nil, nil, fmt.Errorf("node: list snapshots: %w", err)
	}
	if len(metas) == 0 {
		return nil, nil, errors.New("node: no snapshot available")
	}
	return n.snaps.Open(metas[0].ID)
}

// RestoredIndex is the raft index of the snapshot WriteRestoredSnapshot
// writes; the state in it must be as of this index.
const RestoredIndex = 1

// WriteRestoredSnapshot seeds an empty data directory with state as its
// first raft snapshot, with servers as the configuration: the member started
// on it finds existing state and skips bootstrap, so every member of a
// cluster restored from the same file starts from identical state.
func WriteRestoredSnapshot(dataDir string, servers []raft.Server, state io.Reader) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("node: data dir: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dataDir, 2, hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("node: open snapshot store: %w", err)
	}
	// The transport only encodes the legacy peer list inside the snapshot
	// metadata; its address form is the same as the network transport's.
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, RestoredIndex, 1, raft.Configuration{Servers: servers}, RestoredIndex, trans)
	if err != nil {
		return fmt.Errorf("node: create snapshot: %w", err)
	}
	if _, err := io.Copy(sink, state); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("node: write snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("node: write snapshot: %w", err)
	}
	return nil
}

// raftConfig is hashicorp/raft's configuration for a member with cfg;
// notify receives raft's leadership changes.
func raftConfig(cfg Config, notify chan bool) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = ServerID(cfg.ID)
	// etcd users think in heartbeat interval and election timeout.
	// hashicorp/raft heartbeats every HeartbeatTimeout/10 to 2/10, and a
	// follower that hears nothing for HeartbeatTimeout to twice that starts
	// an election; so HeartbeatTimeout is ten heartbeat intervals, capped at
	// half the election timeout, which puts failure detection where etcd's
	// is (about one election timeout) rather than up to twice as late. A
	// leader that hears from no quorum for LeaderLeaseTimeout steps down;
	// raft requires it to be at most HeartbeatTimeout.
	//
	// raft's ElectionTimeout is how long a candidate waits (that to twice
	// that, at random) before it tries again, and a try often fails right
	// after a leader dies: the first follower to notice asks the others for
	// a pre-vote while they still have a leader, and they refuse. With the
	// etcd election timeout there, that wait put failover past 2 s in about
	// one run in eight (bench-vs-etcd failover). With HeartbeatTimeout
	// there, the next try comes at least two heartbeat timeouts after the
	// candidate last heard the leader, by when every follower has noticed.
	rc.HeartbeatTimeout = min(10*cfg.HeartbeatInterval, cfg.ElectionTimeout/2)
	rc.ElectionTimeout = rc.HeartbeatTimeout
	rc.LeaderLeaseTimeout = rc.HeartbeatTimeout
	rc.CommitTimeout = cfg.CommitNotify
	rc.SnapshotThreshold = cfg.SnapshotCount
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.SnapshotCount
	rc.MaxAppendEntries = 512
	rc.BatchApplyCh = true
	rc.NotifyCh = notify
	rc.Logger = raftLogger(cfg, "raft")
	return rc
}

// raftLogger is where hashicorp's libraries (raft, raft-wal) write their
// warnings: cfg.RaftLog, or stderr.
func raftLogger(cfg Config, name string) hclog.Logger {
	out := cfg.RaftLog
	if out == nil {
		out = os.Stderr
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: out})
}

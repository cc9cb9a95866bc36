package readlease

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/internal/drift"
	"github.com/corenode/corenode/lease"
	"github.com/corenode/corenode/lessor"
)

// Config tunes the manager.
type Config struct {
	// Duration is the read lease granted; 0 grants none (reads through the
	// cache service are then answered without a promise).
	Duration time.Duration
	// Window is how long after the start of a leadership confirmation a
	// lease may still be granted under it (argument C). A confirmation that
	// took longer yields the value without a lease.
	Window time.Duration
	// HolderWait is how long a cache read of a key waits for a write of the
	// key still waiting for its holders before it is answered, without a
	// lease: holders that answer take a round trip; one that does not would
	// hold the read for the rest of its lease.
	HolderWait time.Duration
	Limits     Limits
	Clock      lease.Clock
	Logger     *slog.Logger
	// Metrics registers the manager's series when not nil.
	Metrics prometheus.Registerer
	// MaxQueue bounds the messages waiting to be sent on one session; a
	// client that stops reading its stream past it loses the session.
	MaxQueue int
}

// Node is what the manager needs of its member.
type Node interface {
	// ReadBarrier returns once this member's state includes every write
	// acknowledged before the call began, and it was the leader then.
	ReadBarrier(ctx context.Context) error
	// Propose replicates a command through raft (and through the gate).
	Propose(ctx context.Context, op fsm.Op, msg fsm.Message) (any, error)
	FSM() *fsm.FSM
	// IsLeader reports whether raft has this member as its leader now.
	IsLeader() bool
	// LeaderChange is closed at the next change of leader or raft state.
	LeaderChange() <-chan struct{}
}

// Manager is the leader's read-lease service: it runs cache sessions (Open;
// the edge carries them over the network), grants leases, and gates writes
// (node.Gate). It is a node.LeaderService:
// its state lives for one leader term at a time.
//
// All methods are safe for concurrent use.
type Manager struct {
	cfg     Config
	node    Node
	metrics *metrics

	mu      sync.Mutex
	cur     *term
	changed chan struct{} // closed and replaced when cur changes

	holders atomic.Uint64
	marker  sync.Mutex // one OpReadLeases proposal at a time
}

// term is one leader term's state, built when the term's barrier is done
// and torn down when it ends.
type term struct {
	id    uint64
	ctx   context.Context
	mu    sync.Mutex
	table *Table
	// ended is set under mu at teardown: no grant after it.
	ended    bool
	sessions map[HolderID]*session
	writes   map[*Pending]*gated
}

// gated says how far one write admitted by the gate got. Each channel is
// closed once, under term.mu for acked and outside it for the others.
type gated struct {
	acked    chan struct{} // every holder answered
	admitted chan struct{} // Admit let it through: it is in raft
	ended    chan struct{} // it applied on this member, or never will
}

// New returns a manager for a member; register it with node.AddLeaderService
// and node.SetGate.
func New(cfg Config, n Node) *Manager {
	if cfg.Clock == nil {
		cfg.Clock = lease.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 1 << 16
	}
	return &Manager{cfg: cfg, node: n, metrics: registeredMetrics(cfg.Metrics), changed: make(chan struct{})}
}

// Horizon is how long a lease this manager grants may outlive the start of
// the confirmation it was granted under.
func (m *Manager) Horizon() time.Duration { return m.cfg.Duration + m.cfg.Window }

// Run implements node.LeaderService: it builds the term's state once the
// term's barrier is done, and tears it down when leadership ends.
func (m *Manager) Run(ctx context.Context, termID uint64) {
	now := m.cfg.Clock.Now()
	notBefore := now
	rec := m.node.FSM().ReadLeases()
	waiting := rec.GrantTerm > rec.Cleared
	if waiting {
		// Argument C: the leader of rec.GrantTerm may have granted a lease
		// until Horizon after a confirmation that began before this term
		// did (and no later leader waited it out: Cleared is older).
		// drift.Margin covers the rates of two members' clocks differing.
		notBefore = now.Add(rec.Horizon + drift.Margin(rec.Horizon))
	}
	var cleared <-chan time.Time
	if waiting {
		c := m.cfg.Clock.NewTimer(notBefore.Sub(now))
		defer c.Stop()
		cleared = c.C()
	}
	t := &term{id: termID, ctx: ctx, table: NewTable(m.cfg.Duration, m.cfg.Limits, notBefore),
		sessions: map[HolderID]*session{}, writes: map[*Pending]*gated{}}
	m.publish(t)
	defer func() {
		t.mu.Lock()
		t.ended = true
		t.mu.Unlock()
		m.publish(nil)
		m.metrics.held.Set(0)
	}()
	sweep := m.cfg.Duration
	if sweep <= 0 {
		sweep = time.Second
	}
	for {
		timer := m.cfg.Clock.NewTimer(sweep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-cleared:
			timer.Stop()
			cleared = nil
			// Every lease up to rec.GrantTerm has run out: say so, so the
			// next leader need not wait unless this term grants. If this
			// fails, the next leader waits, which is safe.
			if _, err := m.node.Propose(ctx, fsm.OpReadLeases, &fsm.ReadLeases{Cleared: rec.GrantTerm}); err != nil && ctx.Err() == nil {
				m.cfg.Logger.Warn("read leases: cannot record that earlier leases ran out", "err", err)
			}
		case now := <-timer.C():
			t.mu.Lock()
			t.table.Sweep(now)
			m.metrics.held.Set(float64(t.table.Len()))
			t.mu.Unlock()
		}
	}
}

func (m *Manager) publish(t *term) {
	m.mu.Lock()
	m.cur = t
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// current returns the term whose state is built, waiting for it while this
// member leads: a new leader's state is built once its barrier applied
// every earlier entry, including any that raised the horizon.
func (m *Manager) current(ctx context.Context) (*term, error) {
	for {
		leaderChange := m.node.LeaderChange()
		m.mu.Lock()
		t, changed := m.cur, m.changed
		m.mu.Unlock()
		if t != nil && t.ctx.Err() == nil {
			return t, nil
		}
		if !m.node.IsLeader() {
			return nil, ErrLeaderChanged
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		case <-leaderChange:
		}
	}
}

func noop() {}

// Admit implements node.Gate. It reads the command as its proposer passed
// it: the gate never decodes an entry.
func (m *Manager) Admit(ctx context.Context, cmd fsm.Command) (func(), error) {
	w := WriteOf(cmd)
	if w.Empty() {
		return noop, nil
	}
	t, err := m.current(ctx)
	if err != nil {
		return nil, err
	}
	store := m.node.FSM().Store()
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return nil, ErrLeaderChanged
	}
	start := m.cfg.Clock.Now()
	p, invs := t.table.Begin(w, store.LeaseKeys, start)
	g := &gated{acked: make(chan struct{}), admitted: make(chan struct{}), ended: make(chan struct{})}
	t.writes[p] = g
	release := func() {
		t.mu.Lock()
		t.table.End(p)
		delete(t.writes, p)
		t.mu.Unlock()
		close(g.ended)
	}
	if p.Ready() {
		close(g.acked)
		if !start.Before(p.NotBefore) {
			close(g.admitted)
			t.mu.Unlock()
			return release, nil
		}
	}
	for _, inv := range invs {
		if s := t.sessions[inv.Holder]; s != nil {
			s.send(Message{Invalidate: &inv})
			m.metrics.invalidations.Inc()
		}
	}
	t.mu.Unlock()
	if err := m.wait(ctx, t, p, g.acked, start); err != nil {
		release()
		return nil, err
	}
	close(g.admitted)
	return release, nil
}

// wait returns once p may go ahead: every holder answered and NotBefore
// passed, or Until passed (argument B: no lease it waits for is valid then).
func (m *Manager) wait(ctx context.Context, t *term, p *Pending, ready <-chan struct{}, start time.Time) error {
	// Measured from now, not from start: Until is a deadline.
	until := m.cfg.Clock.NewTimer(p.Until.Sub(m.cfg.Clock.Now()))
	defer until.Stop()
	var early lease.Timer
	var earlyC <-chan time.Time
	defer func() {
		if early != nil {
			early.Stop()
		}
	}()
	for {
		select {
		case <-ready:
			ready = nil
			early = m.cfg.Clock.NewTimer(p.NotBefore.Sub(m.cfg.Clock.Now()))
			earlyC = early.C()
			continue
		case <-earlyC:
		case <-until.C():
		case <-ctx.Done():
			return ctx.Err()
		case <-t.ctx.Done():
			return ErrLeaderChanged
		}
		m.metrics.delayed.Inc()
		m.metrics.delay.Observe(m.cfg.Clock.Now().Sub(start).Seconds())
		return nil
	}
}

// ErrNotLeader means the session must be served by the leader. It is
// lessor.ErrNotLeader, corenode's one "not the leader" error.
var ErrNotLeader = lessor.ErrNotLeader

// ErrLeaderChanged means the term a read or a write was gated in ended
// before it finished; the caller retries with whoever leads now.
var ErrLeaderChanged = errors.New("readlease: leader changed")

// recorded reports whether the log says this term grants, with a horizon
// at least this manager's.
func (m *Manager) recorded(termID uint64) bool {
	rec := m.node.FSM().ReadLeases()
	return rec.GrantTerm == termID && rec.Horizon >= m.Horizon()
}

// recordGrants commits OpReadLeases for this term, once.
func (m *Manager) recordGrants(ctx context.Context, termID uint64) error {
	m.marker.Lock()
	defer m.marker.Unlock()
	if m.recorded(termID) {
		return nil
	}
	if _, err := m.node.Propose(ctx, fsm.OpReadLeases, &fsm.ReadLeases{Grant: true, Horizon: m.Horizon()}); err != nil {
		return err
	}
	if !m.recorded(termID) {
		// Applied under another term: leadership moved meanwhile.
		return ErrLeaderChanged
	}
	return nil
}

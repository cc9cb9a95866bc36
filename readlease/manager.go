package readlease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/api/cachepb"
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

// Manager is the leader's read-lease service: it serves cache sessions,
// grants leases, and gates writes (node.Gate). It is a node.LeaderService:
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

// touchesNoKey lists the ops that can never change a key's value.
func touchesNoKey(op fsm.Op) bool {
	switch op {
	case fsm.OpCompact, fsm.OpPublish, fsm.OpMember, fsm.OpLeaseGrant, fsm.OpLeaseCheckpoint, fsm.OpAlarm, fsm.OpReadLeases, fsm.OpAuth:
		return true
	}
	return false
}

func noop() {}

// Admit implements node.Gate.
func (m *Manager) Admit(ctx context.Context, op fsm.Op, data []byte) (func(), error) {
	if touchesNoKey(op) {
		return noop, nil
	}
	cmd, err := fsm.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("readlease: admit: %w", err)
	}
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
			s.send(&cachepb.SessionResponse{Msg: &cachepb.SessionResponse_Invalidate{
				Invalidate: &cachepb.Invalidate{Seq: inv.Seq, Keys: inv.Keys}}})
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

// Serve runs one cache session on the leader until the client ends it or
// the term ends. It returns ErrNotLeader at once when this member has no
// leader term built, so the caller can relay the session to the leader.
func (m *Manager) Serve(stream cachepb.Cache_SessionServer) error {
	m.mu.Lock()
	t := m.cur
	m.mu.Unlock()
	if t == nil || t.ctx.Err() != nil {
		return ErrNotLeader
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	s := &session{id: HolderID(m.holders.Add(1)), wake: make(chan struct{}, 1), max: m.cfg.MaxQueue, cancel: cancel}
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return ErrNotLeader
	}
	t.table.AddHolder(s.id)
	t.sessions[s.id] = s
	t.mu.Unlock()
	m.metrics.sessions.Inc()
	defer func() {
		t.mu.Lock()
		t.table.RemoveHolder(s.id)
		delete(t.sessions, s.id)
		t.mu.Unlock()
		m.metrics.sessions.Dec()
	}()
	sendErr := make(chan error, 1)
	go func() { sendErr <- s.sendLoop(ctx, stream) }()
	recvErr := make(chan error, 1)
	sem := make(chan struct{}, maxSessionGets)
	go func() {
		for {
			req, err := stream.Recv()
			if err == io.EOF {
				// The client ends its session this way only once it
				// answers nothing from memory any more (client/cache's
				// Close): an acknowledgement of every lease at once
				// (argument B). A crash, a cancelled stream or a broken
				// connection ends it with an error instead, and its
				// leases are waited out.
				m.release(t, s.id)
				recvErr <- nil
				return
			}
			if err != nil {
				recvErr <- err
				return
			}
			switch r := req.Msg.(type) {
			case *cachepb.SessionRequest_Get:
				// Bounded: a client that sends Gets faster than they are
				// answered waits here, in its own stream's flow control.
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					recvErr <- ctx.Err()
					return
				}
				go func() {
					defer func() { <-sem }()
					m.get(ctx, t, s, r.Get)
				}()
			case *cachepb.SessionRequest_Ack:
				m.ack(t, s.id, r.Ack.Seq)
			}
		}
	}()
	select {
	case err := <-recvErr:
		return err
	case err := <-sendErr:
		return err
	case <-t.ctx.Done():
		return ErrLeaderChanged
	}
}

// maxSessionGets bounds the reads one session has in progress on the leader.
const maxSessionGets = 256

// ErrNotLeader means the session must be served by the leader. It is
// lessor.ErrNotLeader, corenode's one "not the leader" error.
var ErrNotLeader = lessor.ErrNotLeader

// ErrLeaderChanged means the term a read or a write was gated in ended
// before it finished; the caller retries with whoever leads now.
var ErrLeaderChanged = errors.New("readlease: leader changed")

func (m *Manager) ack(t *term, h HolderID, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.answered(t.table.Ack(h, seq))
}

// release frees every lease of a holder that ended its session cleanly.
func (m *Manager) release(t *term, h HolderID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.answered(t.table.Release(h))
}

// answered lets through the writes whose holders have all answered; the
// caller holds t.mu.
func (t *term) answered(ready []*Pending) {
	for _, p := range ready {
		if g := t.writes[p]; g != nil {
			close(g.acked)
		}
	}
}

// get answers one read: linearizably, with a lease when it may grant one.
func (m *Manager) get(ctx context.Context, t *term, s *session, req *cachepb.GetRequest) {
	m.metrics.hits.Add(float64(req.Hits))
	resp := &cachepb.GetResponse{Id: req.Id}
	answer := func() { s.send(&cachepb.SessionResponse{Msg: &cachepb.SessionResponse_Get{Get: resp}}) }
	fail := func(err error) {
		st, ok := status.FromError(err)
		if !ok {
			// Not a gRPC status: the read could not be confirmed here
			// (leadership lost, member stopping); another try may succeed.
			code := codes.Unavailable
			switch {
			case errors.Is(err, context.Canceled):
				code = codes.Canceled
			case errors.Is(err, context.DeadlineExceeded):
				code = codes.DeadlineExceeded
			}
			st = status.New(code, err.Error())
		}
		resp.Code, resp.Message = uint32(st.Code()), st.Message()
		answer()
	}
	if len(req.Key) == 0 {
		fail(rpctypes.ErrGRPCEmptyKey)
		return
	}
	if err := m.awaitWrites(ctx, t, req.Key); err != nil {
		fail(err)
		return
	}
	start := m.cfg.Clock.Now()
	// Argument C: a successor can be elected only after this confirmation
	// began, and waits out Horizon from then.
	if err := m.node.ReadBarrier(ctx); err != nil {
		fail(err)
		return
	}
	leased := m.cfg.Duration > 0
	if leased && !m.recorded(t.id) {
		// Argument C needs every later leader to know that this term
		// grants, and the horizon, before its first lease exists: it is
		// committed first.
		if err := m.recordGrants(ctx, t.id); err != nil {
			m.cfg.Logger.Warn("read leases: cannot record the horizon; answering without a lease", "err", err)
			leased = false
		}
	}
	store := m.node.FSM().Store()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		fail(ErrLeaderChanged)
		return
	}
	// Argument B: the value is read under the lock that marks writes.
	r, err := store.Range(&pb.RangeRequest{Key: req.Key})
	if err != nil {
		fail(err)
		return
	}
	resp.Revision = r.Header.GetRevision()
	var kvLease int64
	if len(r.Kvs) > 0 {
		kv := r.Kvs[0]
		kvLease = kv.Lease
		resp.Kv = &cachepb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
			Version: kv.Version, Value: kv.Value, Lease: kv.Lease}
	}
	now := m.cfg.Clock.Now()
	if leased && now.Sub(start) <= m.cfg.Window {
		if d := t.table.Grant(s.id, req.Key, kvLease, now); d > 0 {
			resp.LeaseMs = d.Milliseconds()
			m.metrics.grants.Inc()
			m.metrics.held.Set(float64(t.table.Len()))
		}
	}
	if resp.LeaseMs == 0 {
		m.metrics.unleased.Inc()
	}
	// Queued under t.mu: an invalidation of this lease is queued after it.
	answer()
}

// awaitWrites returns once the writes of key admitted before the call have
// ended, so the read that follows sees their values and may take a lease;
// or once HolderWait has passed with one still waiting for its holders: the
// read is then answered without a lease, as before the write, and a holder
// that does not answer delays only the write. A burst of holders
// re-reading while the write is in flight would otherwise each cost a
// leadership confirmation and get a value good for one use, taking the
// CPU the write needs. A read that waits is still answered within its own
// request (it reads after the write, which was concurrent with it), and a
// write never waits for a read (argument B holds: no grant while it waits).
func (m *Manager) awaitWrites(ctx context.Context, t *term, key []byte) error {
	t.mu.Lock()
	var gs []*gated
	for _, p := range t.table.Writing(key) {
		gs = append(gs, t.writes[p])
	}
	t.mu.Unlock()
	if len(gs) == 0 {
		return nil
	}
	m.metrics.readsWaited.Inc()
	bound := m.cfg.Clock.NewTimer(m.cfg.HolderWait)
	defer bound.Stop()
	for _, g := range gs {
		select {
		case <-g.admitted:
		case <-g.ended: // gave up waiting for its holders: nothing to wait for
		case <-bound.C():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.ctx.Done():
			return ErrLeaderChanged
		}
		select {
		case <-g.ended:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.ctx.Done():
			return ErrLeaderChanged
		}
	}
	return nil
}

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

// session is one client stream on the leader: an ordered, bounded queue of
// messages to send.
type session struct {
	id     HolderID
	max    int
	cancel context.CancelFunc

	mu    sync.Mutex
	queue []*cachepb.SessionResponse
	wake  chan struct{}
}

// send queues msg; it never blocks. A client that lets the queue grow past
// its bound loses the session (its leases run out on their own).
func (s *session) send(msg *cachepb.SessionResponse) {
	s.mu.Lock()
	if len(s.queue) >= s.max {
		s.mu.Unlock()
		s.cancel()
		return
	}
	s.queue = append(s.queue, msg)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *session) sendLoop(ctx context.Context, stream cachepb.Cache_SessionServer) error {
	for {
		s.mu.Lock()
		q := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, msg := range q {
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return status.Error(codes.Unavailable, "read-lease session ended: "+context.Cause(ctx).Error())
		case <-s.wake:
		}
	}
}

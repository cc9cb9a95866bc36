package readlease

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Get is one cached read a holder asks of the leader.
type Get struct {
	// ID names the read in its answer.
	ID  uint64
	Key []byte
	// Hits is how many reads the holder answered from memory since its
	// last request (for the hit metric).
	Hits uint64
}

// Message is one message a session sends its holder: exactly one field is
// set. An Invalidation asks the holder to drop its keys before a write of
// them proceeds, and to acknowledge its Seq (Session.Ack) once it has. Messages are sent in the order Next returns them, which the
// session's ordering promise needs (an invalidation of a lease follows the
// answer that granted it).
type Message struct {
	Answer     *Answer
	Invalidate *Invalidation
}

// Answer is the leader's answer to one Get.
type Answer struct {
	ID       uint64
	Revision int64
	// KV is the key's value, nil if the key does not exist.
	KV *mvccpb.KeyValue
	// Lease is the read lease granted on the value, zero for none.
	Lease time.Duration
	// Err is why the read failed; the fields above are then unset but ID.
	// ErrEmptyKey refuses the request; any other error (leadership lost,
	// the member stopping, the read's context ending) may pass on another
	// try.
	Err error
}

// ErrEmptyKey refuses a Get without a key.
var ErrEmptyKey = errors.New("readlease: key is not provided")

// Session is one holder's session on the leader, for one leader term. The
// edge feeds it the holder's requests (Get, Ack, Release) and sends what
// Next returns; it ends when the edge closes it, the holder falls too far
// behind reading (Context ends), or the term ends (Ended). Safe for
// concurrent use.
type Session struct {
	m         *Manager
	t         *term
	s         *session
	ctx       context.Context
	closeOnce sync.Once
}

// Open starts a session on the leader under ctx (the holder's stream). It
// returns ErrNotLeader at once when this member has no leader term built,
// so the caller can relay the session to the leader. The caller must Close
// it.
func (m *Manager) Open(ctx context.Context) (*Session, error) {
	m.mu.Lock()
	t := m.cur
	m.mu.Unlock()
	if t == nil || t.ctx.Err() != nil {
		return nil, ErrNotLeader
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &session{id: HolderID(m.holders.Add(1)), wake: make(chan struct{}, 1), max: m.cfg.MaxQueue, cancel: cancel}
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		cancel()
		return nil, ErrNotLeader
	}
	t.table.AddHolder(s.id)
	t.sessions[s.id] = s
	t.mu.Unlock()
	m.metrics.sessions.Inc()
	return &Session{m: m, t: t, s: s, ctx: ctx}, nil
}

// Context ends when the session does: closed, its holder's stream ended,
// or its queue overflowed.
func (s *Session) Context() context.Context { return s.ctx }

// Ended is closed when the term the session belongs to ends; the session
// is then over (ErrLeaderChanged), and the holder opens a new one, which
// reaches the next leader.
func (s *Session) Ended() <-chan struct{} { return s.t.ctx.Done() }

// Close ends the session: the holder's leases are kept until they run out
// (or until a Release), and its context is cancelled.
func (s *Session) Close() {
	s.closeOnce.Do(func() {
		t := s.t
		t.mu.Lock()
		t.table.RemoveHolder(s.s.id)
		delete(t.sessions, s.s.id)
		t.mu.Unlock()
		s.m.metrics.sessions.Dec()
		s.s.cancel()
	})
}

// Get answers g: linearizably, with a lease when it may grant one. The
// answer is queued for Next rather than returned, under the lock that
// orders it before any invalidation of the lease it grants. It blocks
// until then; calls may run concurrently.
func (s *Session) Get(ctx context.Context, g Get) { s.m.get(ctx, s.t, s.s, g) }

// Ack records that the holder dropped the keys of invalidation seq.
func (s *Session) Ack(seq uint64) { s.m.ack(s.t, s.s.id, seq) }

// Release frees every lease of the holder at once. Call it only when the
// holder has promised to answer nothing from memory any more (client/cache
// ends its session cleanly only once it does): that is an acknowledgement
// of every lease (argument B). A crash, a cancelled stream or a broken
// connection must end the session without it, and its leases are waited
// out.
func (s *Session) Release() { s.m.release(s.t, s.s.id) }

// Next returns the messages queued for the holder, in order, waiting until
// there is one. Once the session's context has ended it returns that
// context's cause instead.
func (s *Session) Next() ([]Message, error) {
	for {
		s.s.mu.Lock()
		q := s.s.queue
		s.s.queue = nil
		s.s.mu.Unlock()
		if len(q) > 0 {
			return q, nil
		}
		select {
		case <-s.ctx.Done():
			return nil, context.Cause(s.ctx)
		case <-s.s.wake:
		}
	}
}

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

// get answers one read and queues the answer on s.
func (m *Manager) get(ctx context.Context, t *term, s *session, req Get) {
	m.metrics.hits.Add(float64(req.Hits))
	resp := &Answer{ID: req.ID}
	answer := func() { s.send(Message{Answer: resp}) }
	fail := func(err error) {
		resp.Err = err
		answer()
	}
	if len(req.Key) == 0 {
		fail(ErrEmptyKey)
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
		resp.KV = r.Kvs[0]
		kvLease = resp.KV.Lease
	}
	now := m.cfg.Clock.Now()
	if leased && now.Sub(start) <= m.cfg.Window {
		if d := t.table.Grant(s.id, req.Key, kvLease, now); d > 0 {
			resp.Lease = d
			m.metrics.grants.Inc()
			m.metrics.held.Set(float64(t.table.Len()))
		}
	}
	if resp.Lease == 0 {
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

// session is one client stream on the leader: an ordered, bounded queue of
// messages to send.
type session struct {
	id     HolderID
	max    int
	cancel context.CancelFunc

	mu    sync.Mutex
	queue []Message
	wake  chan struct{}
}

// send queues msg; it never blocks. A client that lets the queue grow past
// its bound loses the session (its leases run out on their own).
func (s *session) send(msg Message) {
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

package readlease

import (
	"context"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/internal/drift"
	"github.com/corenode/corenode/lease"
)

// hangAfter bounds every wait on the manager's goroutines, so a broken
// manager fails the test instead of hanging it; a passing test never comes
// near it.
const hangAfter = 10 * time.Second

// stepClock is a lease.Clock that moves only when the test calls advance,
// which fires the timers due by then.
type stepClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*stepTimer
	// made is closed and replaced whenever a timer is made.
	made chan struct{}
}

type stepTimer struct {
	at time.Time
	ch chan time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) NewTimer(d time.Duration) lease.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &stepTimer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if c.made != nil {
		close(c.made)
	}
	c.made = make(chan struct{})
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

func (t *stepTimer) C() <-chan time.Time { return t.ch }

// Stop drops a timer that has not fired; the tests never rely on its answer.
func (t *stepTimer) Stop() bool { return true }

// awaitTimers waits until n timers are set to fire exactly at at: the
// manager waits for that instant, not a moment earlier or later.
func (c *stepClock) awaitTimers(t *testing.T, at time.Time, n int) {
	t.Helper()
	deadline := time.After(hangAfter)
	for {
		c.mu.Lock()
		found := 0
		for _, tm := range c.timers {
			if tm.at.Equal(at) {
				found++
			}
		}
		if c.made == nil {
			c.made = make(chan struct{})
		}
		made := c.made
		c.mu.Unlock()
		if found >= n {
			return
		}
		select {
		case <-made:
		case <-deadline:
			t.Fatalf("no %d timers set for %v after %v", n, at, hangAfter)
		}
	}
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = kept
}

// stepNode applies proposals to a real FSM at once, in term.
type stepNode struct {
	f         *fsm.FSM
	term      uint64
	proposals chan fsm.Op
}

func (n *stepNode) ReadBarrier(context.Context) error { return nil }
func (n *stepNode) FSM() *fsm.FSM                     { return n.f }
func (n *stepNode) IsLeader() bool                    { return true }
func (n *stepNode) LeaderChange() <-chan struct{}     { return nil }

func (n *stepNode) Propose(_ context.Context, op fsm.Op, msg fsm.Message) (any, error) {
	data, err := fsm.Encode(op, msg)
	if err != nil {
		return nil, err
	}
	res := n.f.Apply(&raft.Log{Type: raft.LogCommand, Term: n.term, Data: data}).(fsm.Result)
	n.proposals <- op
	return res.Resp, res.Err
}

type managerHarness struct {
	t     *testing.T
	clock *stepClock
	node  *stepNode
	m     *Manager
	term  *term
	// stop ends the term and returns once Run has returned.
	stop func()
}

func newManagerHarness(t *testing.T, termID uint64, record ...*fsm.ReadLeases) *managerHarness {
	h := &managerHarness{t: t, clock: &stepClock{now: time.Unix(1000, 0)},
		node: &stepNode{f: fsm.New(nil, nil, nil), term: termID - 1, proposals: make(chan fsm.Op, 16)}}
	for _, r := range record {
		h.node.Propose(context.Background(), fsm.OpReadLeases, r)
		<-h.node.proposals
	}
	h.node.term = termID
	h.m = New(Config{Duration: dur, Window: 250 * time.Millisecond, HolderWait: holderWait, Limits: Limits{MaxKeys: 10, MaxHoldersPerKey: 10}, Clock: h.clock}, h.node)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.m.Run(ctx, termID)
	}()
	h.stop = sync.OnceFunc(func() {
		cancel()
		<-done
	})
	t.Cleanup(h.stop)
	wctx, wcancel := context.WithTimeout(context.Background(), hangAfter)
	defer wcancel()
	var err error
	if h.term, err = h.m.current(wctx); err != nil {
		t.Fatalf("the term's state was never built: %v", err)
	}
	return h
}

const holderWait = 20 * time.Millisecond

// session registers a session that holds nothing yet.
func (h *managerHarness) session(id HolderID) *session {
	s := &session{id: id, wake: make(chan struct{}, 1), max: 100, cancel: func() {}}
	h.term.mu.Lock()
	defer h.term.mu.Unlock()
	h.term.table.AddHolder(id)
	h.term.sessions[id] = s
	return s
}

// holder registers a session that takes a lease on key now, and returns it.
func (h *managerHarness) holder(id HolderID, key string) *session {
	s := h.session(id)
	h.term.mu.Lock()
	defer h.term.mu.Unlock()
	if h.term.table.Grant(id, []byte(key), 0, h.clock.Now()) == 0 {
		h.t.Fatal("no lease granted")
	}
	return s
}

// put admits a put of key in the background; the channel gets the clock's
// time when Admit returned.
func (h *managerHarness) put(key string) <-chan time.Time {
	end := make(chan struct{})
	close(end)
	return h.putUntil(key, end)
}

// putUntil is put, with the write in flight (admitted, not applied) until
// end is closed.
func (h *managerHarness) putUntil(key string, end <-chan struct{}) <-chan time.Time {
	cmd := fsm.Command{Op: fsm.OpPut, Msg: &pb.PutRequest{Key: []byte(key), Value: []byte("v")}}
	out := make(chan time.Time, 1)
	go func() {
		release, err := h.m.Admit(context.Background(), cmd)
		if err != nil {
			h.t.Errorf("admit: %v", err)
			return
		}
		out <- h.clock.Now()
		<-end
		release()
	}()
	return out
}

// get reads key through s in the background, as a cache's GetRequest.
func (h *managerHarness) get(s *session, key string) {
	go h.m.get(context.Background(), h.term, s, Get{ID: 1, Key: []byte(key)})
}

func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangAfter):
		t.Fatalf("%s: nothing after %v", what, hangAfter)
	}
	var zero T
	return zero
}

// invalidation waits until the session has an Invalidate queued.
func invalidation(t *testing.T, s *session) uint64 {
	t.Helper()
	return queued(t, s, "invalidation", func(m Message) *Invalidation { return m.Invalidate }).Seq
}

// answer waits until the session has an Answer queued.
func answer(t *testing.T, s *session) *Answer {
	t.Helper()
	return queued(t, s, "answer", func(m Message) *Answer { return m.Answer })
}

// queued waits until the session has a message of the kind pick returns.
func queued[T comparable](t *testing.T, s *session, what string, pick func(Message) T) T {
	t.Helper()
	var zero T
	for {
		s.mu.Lock()
		for _, m := range s.queue {
			if v := pick(m); v != zero {
				s.mu.Unlock()
				return v
			}
		}
		s.mu.Unlock()
		await(t, s.wake, what)
	}
}

// hasAnswer reports whether the session has an Answer queued now.
func hasAnswer(s *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.queue {
		if m.Answer != nil {
			return true
		}
	}
	return false
}

// A write waits for the holder's answer, and goes ahead on it, before the
// lease runs out.
func TestAdmitWaitsForTheAnswer(t *testing.T) {
	h := newManagerHarness(t, 2)
	s := h.holder(1, "k")
	admitted := h.put("k")
	seq := invalidation(t, s)
	h.clock.advance(time.Second) // half the lease: not enough on its own
	h.m.ack(h.term, 1, seq)
	if at := await(t, admitted, "admit after the answer"); !at.Equal(time.Unix(1001, 0)) {
		t.Fatalf("admitted at %v, want at the answer, 1001", at.Unix())
	}
}

// A holder that ends its session cleanly releases its leases: the write
// waiting for it goes ahead then, and a later write of another key it held
// does not wait at all.
func TestAdmitGoesAheadOnARelease(t *testing.T) {
	h := newManagerHarness(t, 2)
	s := h.holder(1, "k")
	h.term.mu.Lock()
	h.term.table.Grant(1, []byte("j"), 0, h.clock.Now())
	h.term.mu.Unlock()
	admitted := h.put("k")
	invalidation(t, s)
	h.clock.advance(time.Second)
	h.m.release(h.term, 1)
	if at := await(t, admitted, "admit after the release"); !at.Equal(time.Unix(1001, 0)) {
		t.Fatalf("admitted at %v, want at the release, 1001", at.Unix())
	}
	if at := await(t, h.put("j"), "admit of the other key"); !at.Equal(time.Unix(1001, 0)) {
		t.Fatalf("admitted at %v, want at once, 1001", at.Unix())
	}
}

// A holder that never answers holds the write until its lease ran out,
// not a moment less.
func TestAdmitWaitsOutASilentHolder(t *testing.T) {
	h := newManagerHarness(t, 2)
	// Granted off the sweep's schedule, so no other timer shares its
	// deadline.
	h.clock.advance(100 * time.Millisecond)
	s := h.holder(1, "k")
	deadline := time.Unix(1000, 0).Add(100 * time.Millisecond).Add(dur)
	admitted := h.put("k")
	invalidation(t, s)
	h.clock.awaitTimers(t, deadline, 1)
	h.clock.advance(dur)
	if at := await(t, admitted, "admit at the deadline"); !at.Equal(deadline) {
		t.Fatalf("admitted at %v, want when the lease ran out, %v", at, deadline)
	}
}

// A leader whose predecessor's term granted holds writes for the horizon
// plus the margin, then records that it waited; one whose predecessors'
// grants were cleared does not wait.
func TestNewLeaderWaitsOutThenClears(t *testing.T) {
	horizon := 3 * time.Second
	h := newManagerHarness(t, 2, &fsm.ReadLeases{Grant: true, Horizon: horizon})
	admitted := h.put("k")
	wait := horizon + drift.Margin(horizon)
	// Two timers at the end of the wait: the write's, and the one that
	// records the clearing.
	h.clock.awaitTimers(t, time.Unix(1000, 0).Add(wait), 2)
	h.clock.advance(wait)
	if at := await(t, admitted, "admit after the horizon"); !at.Equal(time.Unix(1000, 0).Add(wait)) {
		t.Fatalf("admitted %v after the term began, want after the horizon and margin, %v", at.Sub(time.Unix(1000, 0)), wait)
	}
	if op := await(t, h.node.proposals, "the clearing record"); op != fsm.OpReadLeases {
		t.Fatalf("proposed %s, want the clearing record", op)
	}
	if r := h.node.f.ReadLeases(); r.Cleared != 1 || r.GrantTerm != 1 {
		t.Fatalf("record %+v, want term 1 granting and cleared", r)
	}

	cleared := newManagerHarness(t, 3, &fsm.ReadLeases{Grant: true, Horizon: horizon}, &fsm.ReadLeases{Cleared: 2})
	if at := await(t, cleared.put("k"), "admit when cleared"); !at.Equal(time.Unix(1000, 0)) {
		t.Fatalf("admitted at %v with every earlier grant cleared, want at once", at)
	}
}

// A read of a key whose write is in flight waits for the write to apply,
// then takes a lease on what it reads: re-reads during a write would each
// cost a confirmation and give a value good for one use.
func TestReadWaitsForTheWriteInFlight(t *testing.T) {
	h := newManagerHarness(t, 2)
	s := h.holder(1, "k")
	end := make(chan struct{})
	admitted := h.putUntil("k", end)
	h.m.ack(h.term, 1, invalidation(t, s))
	await(t, admitted, "admit after the answer")

	reader := h.session(2)
	h.get(reader, "k")
	// The read has set its bound on the wait for holders: it is past the
	// write's admission and waits for its end.
	h.clock.awaitTimers(t, h.clock.Now().Add(holderWait), 1)
	if hasAnswer(reader) {
		t.Fatal("answered while the write was in flight")
	}
	close(end)
	if r := answer(t, reader); r.Err != nil || r.Lease != dur {
		t.Fatalf("answer after the write: error %v, lease %v; want a lease of %v", r.Err, r.Lease, dur)
	}
}

// A read of a key whose write waits for a holder that does not answer is
// answered without a lease after HolderWait: the silent holder delays the
// write, not the key's readers.
func TestReadDoesNotWaitForASilentHolder(t *testing.T) {
	h := newManagerHarness(t, 2)
	s := h.holder(1, "k")
	admitted := h.put("k")
	invalidation(t, s)

	reader := h.session(2)
	h.get(reader, "k")
	bound := h.clock.Now().Add(holderWait)
	h.clock.awaitTimers(t, bound, 1)
	if hasAnswer(reader) {
		t.Fatal("answered before HolderWait while the write waited for its holder")
	}
	h.clock.advance(holderWait)
	if r := answer(t, reader); r.Err != nil || r.Lease != 0 {
		t.Fatalf("answer: error %v, lease %v; want the value without a lease", r.Err, r.Lease)
	}
	select {
	case <-admitted:
		t.Fatal("the write went ahead without the holder's answer or the lease's end")
	default:
	}
	h.clock.advance(dur)
	await(t, admitted, "admit when the lease ran out")
}

// A read waiting for a write that gives up (its proposer went away while it
// waited for a silent holder) goes ahead at once, not after HolderWait.
func TestReadGoesOnWhenTheWriteGivesUp(t *testing.T) {
	h := newManagerHarness(t, 2)
	s := h.holder(1, "k")
	cmd := fsm.Command{Op: fsm.OpPut, Msg: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := h.m.Admit(ctx, cmd)
		gaveUp <- err
	}()
	invalidation(t, s)

	reader := h.session(2)
	h.get(reader, "k")
	h.clock.awaitTimers(t, h.clock.Now().Add(holderWait), 1)
	cancel()
	if err := await(t, gaveUp, "the write giving up"); err == nil {
		t.Fatal("admitted a write whose holder never answered, before its lease ran out")
	}
	if r := answer(t, reader); r.Err != nil || r.Lease != dur {
		t.Fatalf("answer: error %v, lease %v; want the value with a lease of %v", r.Err, r.Lease, dur)
	}
}

package election

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fakeClock moves only when the test advances it; due timers run in the
// advancing goroutine, in deadline order, before Advance returns.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) At(at time.Time, f func()) Stopper {
	c.mu.Lock()
	t := &fakeTimer{c: c, at: at, f: f}
	if at.After(c.now) {
		c.timers = append(c.timers, t)
		c.mu.Unlock()
		return t
	}
	t.stopped = true
	c.mu.Unlock()
	go f()
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Advance moves the clock by d, firing due timers at their own instants.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		var next *fakeTimer
		for len(c.timers) > 0 && c.timers[0].stopped {
			c.timers = c.timers[1:]
		}
		if len(c.timers) > 0 && !c.timers[0].at.After(end) {
			next, c.timers = c.timers[0], c.timers[1:]
		}
		if next == nil {
			break
		}
		next.stopped = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// keepAlive is one KeepAliveOnce call the test answers.
type keepAlive struct {
	ctx   context.Context
	reply chan<- keepAliveReply
}

type keepAliveReply struct {
	ttl int64
	err error
}

// fakeLease grants at once and hands each keep-alive to the test.
type fakeLease struct {
	clientv3.Lease // only the methods below are used
	grantTTL       int64
	keepAlives     chan keepAlive
	revoked        chan clientv3.LeaseID
}

func newFakeLease(ttl int64) *fakeLease {
	return &fakeLease{grantTTL: ttl, keepAlives: make(chan keepAlive), revoked: make(chan clientv3.LeaseID, 1)}
}

func (f *fakeLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	return &clientv3.LeaseGrantResponse{ID: 42, TTL: f.grantTTL}, nil
}

func (f *fakeLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	reply := make(chan keepAliveReply, 1)
	select {
	case f.keepAlives <- keepAlive{ctx: ctx, reply: reply}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-reply:
		if r.err != nil {
			return nil, r.err
		}
		if r.ttl <= 0 {
			return nil, rpctypes.ErrLeaseNotFound
		}
		return &clientv3.LeaseKeepAliveResponse{ID: id, TTL: r.ttl}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeLease) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	f.revoked <- id
	return &clientv3.LeaseRevokeResponse{}, nil
}

// harness is a keeper on a fake clock and lease, with a channel that says
// when a keep-alive answer (or failure) has been applied.
type harness struct {
	t       *testing.T
	clock   *fakeClock
	lease   *fakeLease
	k       *keeper
	renewed chan error
	start   time.Time
}

const (
	hTTL    = 9 * time.Second
	hMargin = 300 * time.Millisecond
)

func newHarness(t *testing.T, opts ...Option) *harness {
	h := &harness{t: t, clock: newFakeClock(), lease: newFakeLease(int64(hTTL / time.Second)), renewed: make(chan error, 1)}
	cfg, err := newConfig(append([]Option{WithTTL(hTTL), WithDriftMargin(hMargin), WithClock(h.clock),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		withRenewHook(func(err error) { h.renewed <- err })}, opts...))
	if err != nil {
		t.Fatal(err)
	}
	h.start = h.clock.Now()
	h.k, err = grant(context.Background(), h.lease, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.k.end(ErrResigned) })
	return h
}

// nextKeepAlive waits for the keeper's next keep-alive request.
func (h *harness) nextKeepAlive() keepAlive {
	h.t.Helper()
	select {
	case ka := <-h.lease.keepAlives:
		return ka
	case <-time.After(5 * time.Second):
		h.t.Fatal("no keep-alive sent")
		return keepAlive{}
	}
}

// answer replies to ka and waits until the keeper has applied the reply.
func (h *harness) answer(ka keepAlive, r keepAliveReply) {
	h.t.Helper()
	ka.reply <- r
	select {
	case <-h.renewed:
	case <-time.After(5 * time.Second):
		h.t.Fatal("keep-alive answer not applied")
	}
}

// at advances the clock to start+d.
func (h *harness) at(d time.Duration) {
	h.t.Helper()
	step := h.start.Add(d).Sub(h.clock.Now())
	if step < 0 {
		h.t.Fatalf("clock at start+%v cannot go back to start+%v", h.clock.Now().Sub(h.start), d)
	}
	h.clock.Advance(step)
}

func (h *harness) closed() bool {
	select {
	case <-h.k.done:
		return true
	default:
		return false
	}
}

// expectLeading asserts valid() and Done agree with want.
func (h *harness) expectLeading(want bool, when string) {
	h.t.Helper()
	if got := h.k.valid(); got != want {
		h.t.Fatalf("%s: valid() = %v, want %v", when, got, want)
	}
	if h.closed() == want {
		h.t.Fatalf("%s: Done closed = %v, want %v", when, !want, want)
	}
}

// TestDeadlineFromGrant: without a keep-alive answer, leadership ends
// exactly at grant send time + TTL - margin; Done closes at that instant
// from the timer, before anyone calls Leading.
func TestDeadlineFromGrant(t *testing.T) {
	h := newHarness(t)
	deadline := hTTL - hMargin
	h.at(hTTL / 3)
	h.nextKeepAlive() // sent, never answered
	h.at(deadline - time.Nanosecond)
	h.expectLeading(true, "1ns before the deadline")
	h.at(deadline)
	if !h.closed() {
		t.Fatal("Done not closed at the deadline")
	}
	h.expectLeading(false, "at the deadline")
	if cause := context.Cause(h.k.ctx); !errors.Is(cause, ErrExpired) {
		t.Fatalf("cause %v, want ErrExpired", cause)
	}
	select {
	case <-h.lease.revoked:
	case <-time.After(5 * time.Second):
		t.Fatal("lease not revoked after the deadline")
	}
}

// TestDeadlineFromSendTime: a keep-alive answered late extends the
// deadline from when it was sent, not from when the answer came.
func TestDeadlineFromSendTime(t *testing.T) {
	h := newHarness(t)
	sent := hTTL / 3
	h.at(sent)
	ka := h.nextKeepAlive()
	h.at(sent + 2*time.Second) // the answer takes 2 s
	h.answer(ka, keepAliveReply{ttl: int64(hTTL / time.Second)})
	deadline := sent + hTTL - hMargin
	if got := h.k.currentDeadline().Sub(h.start); got != deadline {
		t.Fatalf("deadline start+%v, want start+%v", got, deadline)
	}
	// The next renewal is due at sent+TTL/3; leave it unanswered.
	h.at(sent + hTTL/3)
	h.nextKeepAlive()
	h.at(hTTL - hMargin) // the grant's deadline has passed; the renewal's not
	h.expectLeading(true, "after the grant's deadline, before the renewal's")
	h.at(deadline - time.Nanosecond)
	h.expectLeading(true, "1ns before the renewed deadline")
	h.at(deadline)
	h.expectLeading(false, "at the renewed deadline")
}

// TestLateAnswerDoesNotRevive: an answer that arrives after the deadline
// leaves the leadership ended.
func TestLateAnswerDoesNotRevive(t *testing.T) {
	h := newHarness(t)
	h.at(hTTL / 3)
	ka := h.nextKeepAlive()
	h.at(hTTL - hMargin)
	h.expectLeading(false, "at the deadline")
	select {
	case ka.reply <- keepAliveReply{ttl: int64(hTTL / time.Second)}:
	case <-ka.ctx.Done(): // the keeper gave up the call when it ended
	}
	h.expectLeading(false, "after a late answer")
}

// TestLeaseGoneEndsAtOnce: a keep-alive that answers TTL 0 ends the
// leadership at that instant, long before the deadline.
func TestLeaseGoneEndsAtOnce(t *testing.T) {
	h := newHarness(t)
	h.at(hTTL / 3)
	h.answer(h.nextKeepAlive(), keepAliveReply{ttl: 0})
	h.expectLeading(false, "after TTL 0")
	if cause := context.Cause(h.k.ctx); !errors.Is(cause, ErrLeaseGone) {
		t.Fatalf("cause %v, want ErrLeaseGone", cause)
	}
}

// TestHealthyHolderKeepsLeading: renewals every TTL/3, answered, keep a
// holder leading across many TTLs; a failed renewal is retried after
// TTL/20, not after another TTL/3.
func TestHealthyHolderKeepsLeading(t *testing.T) {
	h := newHarness(t)
	now := time.Duration(0)
	for i := range 30 {
		now += hTTL / 3
		h.at(now)
		ka := h.nextKeepAlive()
		if i == 10 {
			h.answer(ka, keepAliveReply{err: errors.New("unavailable")})
			now += hTTL / 20
			h.at(now)
			ka = h.nextKeepAlive()
		}
		h.answer(ka, keepAliveReply{ttl: int64(hTTL / time.Second)})
		h.expectLeading(true, "after renewal")
	}
	if got, want := h.k.currentDeadline().Sub(h.start), now+hTTL-hMargin; got != want {
		t.Fatalf("deadline start+%v, want start+%v", got, want)
	}
}

// TestResignEndsBeforeRevoke: Resign's leadership ends before the lease is
// released.
func TestResignEndsBeforeRevoke(t *testing.T) {
	h := newHarness(t)
	h.k.end(ErrResigned)
	h.expectLeading(false, "after end(ErrResigned)")
	select {
	case <-h.lease.revoked:
		t.Fatal("end(ErrResigned) revoked the lease itself; Resign does that")
	default:
	}
	if err := h.k.revoke(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-h.lease.revoked
}

func TestDefaultDriftMargin(t *testing.T) {
	for _, tc := range []struct{ ttl, want time.Duration }{
		{time.Second, 60 * time.Millisecond},
		{10 * time.Second, 150 * time.Millisecond},
		{60 * time.Second, 650 * time.Millisecond},
	} {
		if got := DefaultDriftMargin(tc.ttl); got != tc.want {
			t.Errorf("DefaultDriftMargin(%v) = %v, want %v", tc.ttl, got, tc.want)
		}
	}
	if _, err := newConfig([]Option{WithTTL(time.Second), WithDriftMargin(time.Second)}); err == nil {
		t.Error("a margin as long as the TTL was accepted")
	}
	if _, err := newConfig([]Option{WithClock(nil)}); err == nil {
		t.Error("a nil clock was accepted")
	}
	c, err := newConfig([]Option{WithTTL(1500 * time.Millisecond)})
	if err != nil || c.ttl != 2*time.Second {
		t.Errorf("TTL 1.5s became %v (err %v), want 2s", c.ttl, err)
	}
}

// TestOnRenewHearsEachMove: WithOnRenew hears the new deadline of every
// keep-alive that moved it, before the keeper reports the answer applied,
// and nothing for one that did not move it (a shorter TTL answered).
func TestOnRenewHearsEachMove(t *testing.T) {
	var heard []time.Time
	h := newHarness(t, WithOnRenew(func(d time.Time) { heard = append(heard, d) }))
	h.at(hTTL / 3)
	h.answer(h.nextKeepAlive(), keepAliveReply{ttl: int64(hTTL / time.Second)})
	want := h.start.Add(hTTL/3 + hTTL - hMargin)
	if len(heard) != 1 || !heard[0].Equal(want) {
		t.Fatalf("after one renewal heard %v, want [%v]", heard, want)
	}
	if got := h.k.currentDeadline(); !got.Equal(want) {
		t.Fatalf("deadline %v, want the one heard, %v", got, want)
	}
	h.at(2 * hTTL / 3)
	h.answer(h.nextKeepAlive(), keepAliveReply{ttl: 1})
	if len(heard) != 1 {
		t.Fatalf("a renewal that did not move the deadline was heard: %v", heard)
	}
}

package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/lease"
)

// fakeProposer applies proposals to a lease table, as the FSM would, and
// records them.
type fakeProposer struct {
	mu      sync.Mutex
	table   *lease.Table
	tr      *lease.Tracker
	applied []any // *lease.Checkpoint and *lease.Expire, in apply order
	leading bool
	// hold, when set, receives every proposal before it applies; the
	// proposal then waits for the test's verdict (nil: apply, else fail
	// with it) or for its context to end.
	hold chan heldProposal
}

type heldProposal struct {
	entry   any
	verdict chan<- error
}

func (p *fakeProposer) ProposeCheckpoint(ctx context.Context, c *lease.Checkpoint) error {
	return p.propose(ctx, c, func() { p.table.Apply(c) })
}

func (p *fakeProposer) ProposeExpire(ctx context.Context, e *lease.Expire) error {
	return p.propose(ctx, e, func() {
		for _, id := range e.IDs {
			p.table.Revoke(id)
			p.tr.Removed(id)
		}
	})
}

func (p *fakeProposer) propose(ctx context.Context, entry any, apply func()) error {
	if p.hold != nil {
		verdict := make(chan error, 1)
		select {
		case p.hold <- heldProposal{entry, verdict}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-verdict:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.leading {
		return errors.New("not leader")
	}
	apply()
	p.applied = append(p.applied, entry)
	return nil
}

func (p *fakeProposer) PromoteLeases(fn func(int64, []lease.Lease)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(p.table.Clock(), p.table.Leases())
}

func (p *fakeProposer) lookup(id int64) (lease.Lease, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.table.Lookup(id)
}

// harness runs a scheduler on a fake clock over two leases, 1 (TTL 5 s)
// and 2 (TTL 10 s), never checkpointed, promoted at t0: their deadlines are
// t0+5s and t0+10s, and both are due for their first checkpoint at the
// first tick (t0+100ms).
type harness struct {
	t      *testing.T
	s      *Scheduler
	p      *fakeProposer
	clock  *fakeClock
	reg    *prometheus.Registry
	t0     time.Time
	cancel context.CancelFunc
	done   chan struct{}
	seen   int // applied entries wantProposed has checked
}

const tick = 100 * time.Millisecond

// start returns once the scheduler waits for its first tick. With hold,
// every proposal waits for the test's verdict (see next).
func start(t *testing.T, hold bool) *harness {
	h := &harness{t: t, clock: newFakeClock(time.Unix(100, 0)), reg: prometheus.NewRegistry(), done: make(chan struct{})}
	h.t0 = h.clock.Now()
	tr := lease.NewTracker(h.clock, lease.TrackerConfig{CheckpointAfter: time.Second})
	h.p = &fakeProposer{table: lease.NewTable(), tr: tr, leading: true}
	if hold {
		h.p.hold = make(chan heldProposal)
	}
	h.p.table.Grant(1, 5)
	h.p.table.Grant(2, 10)
	h.s = New(tr, h.p, Config{Tick: tick}, NewMetrics(h.reg), slog.New(slog.NewTextHandler(io.Discard, nil)))
	var ctx context.Context
	ctx, h.cancel = context.WithCancel(context.Background())
	go func() {
		h.s.Run(ctx, 1)
		close(h.done)
	}()
	t.Cleanup(h.stop)
	h.clock.awaitPending(t, 1)
	h.wantWaitingUntil(100 * time.Millisecond)
	return h
}

// stop demotes the scheduler and returns once Run has returned.
func (h *harness) stop() {
	h.cancel()
	<-h.done
}

// step advances the clock by d and returns once the scheduler is idle
// again: if d reached its timer, it has done all it had to and waits on a
// new one; if not, it never woke.
func (h *harness) step(d time.Duration) {
	h.t.Helper()
	h.clock.advance(d)
	h.clock.awaitPending(h.t, 1)
}

// wantWaitingUntil checks that the scheduler waits on exactly one timer,
// due at t0+at.
func (h *harness) wantWaitingUntil(at time.Duration) {
	h.t.Helper()
	if d, _ := h.clock.timers(); !slices.Equal(d, []time.Time{h.t0.Add(at)}) {
		h.t.Fatalf("timers pending due at t0+%v, want one due at t0+%v", sinceT0(h.t0, d), at)
	}
}

func sinceT0(t0 time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(t0)
	}
	return out
}

// wantProposed checks the entries applied since the last call.
func (h *harness) wantProposed(want ...any) {
	h.t.Helper()
	h.p.mu.Lock()
	got := h.p.applied[h.seen:]
	h.seen = len(h.p.applied)
	h.p.mu.Unlock()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		h.t.Fatalf("proposed %s, want %s", describe(got), describe(want))
	}
}

// next returns the proposal the scheduler holds, and checks it is want.
func (h *harness) next(want any) heldProposal {
	h.t.Helper()
	hp := recv(h.t, h.p.hold, "proposal")
	if !reflect.DeepEqual(hp.entry, want) {
		h.t.Fatalf("proposing %s, want %s", describe([]any{hp.entry}), describe([]any{want}))
	}
	return hp
}

// describe prints entries with their field names.
func describe(entries []any) string {
	s := make([]string, len(entries))
	for i, e := range entries {
		switch e := e.(type) {
		case *lease.Checkpoint:
			s[i] = fmt.Sprintf("checkpoint%+v", *e)
		case *lease.Expire:
			s[i] = fmt.Sprintf("expire%+v", *e)
		}
	}
	return "[" + strings.Join(s, " ") + "]"
}

func checkpoint(clock int64, resets []int64, expiries ...lease.Expiry) *lease.Checkpoint {
	if len(expiries) == 0 {
		expiries = nil
	}
	return &lease.Checkpoint{Clock: clock, Resets: resets, Expiries: expiries}
}

func expire(ids ...int64) *lease.Expire { return &lease.Expire{IDs: ids} }

// firstCheckpoint is what the first tick proposes: both leases, with the
// deadlines Promote gave them, on the lease clock (milliseconds since t0).
var firstCheckpoint = checkpoint(100, nil, lease.Expiry{ID: 1, Expiry: 5000}, lease.Expiry{ID: 2, Expiry: 10000})

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	guard := time.NewTimer(hangAfter)
	defer guard.Stop()
	select {
	case v := <-ch:
		return v
	case <-guard.C:
		t.Fatalf("no %s within %v", what, hangAfter)
		panic("unreachable")
	}
}

// wantLag checks the expiry-lag histogram: its number of samples and their
// sum in seconds.
func (h *harness) wantLag(count uint64, sum float64) {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "corenode_lease_expiry_lag_seconds" {
			hist := mf.GetMetric()[0].GetHistogram()
			if hist.GetSampleCount() != count || hist.GetSampleSum() != sum {
				h.t.Fatalf("expiry lag: %d samples summing to %v s, want %d summing to %v s", hist.GetSampleCount(), hist.GetSampleSum(), count, sum)
			}
			return
		}
	}
	h.t.Fatal("no expiry lag histogram")
}

// settled is what AwaitCheckpoint or AwaitExpiry returned.
type settled struct {
	ok  bool
	err error
}

// waitingCtx tells the test when a call selects on its Done channel. A
// wait does that only once it has nothing left to do but wait for the
// scheduler, so a receive from waiting means it waits, and anything that
// wakes it afterwards is something the test did.
type waitingCtx struct {
	context.Context
	waiting chan struct{}
}

func (c waitingCtx) Done() <-chan struct{} {
	select {
	case c.waiting <- struct{}{}:
	default:
	}
	return c.Context.Done()
}

// await starts wait (AwaitCheckpoint or AwaitExpiry) and returns once it
// waits; it fails the test if wait returns instead.
func (h *harness) await(what string, wait func(context.Context) (bool, error)) <-chan settled {
	h.t.Helper()
	ctx := waitingCtx{context.Background(), make(chan struct{}, 1)}
	answered := make(chan settled, 1)
	go func() {
		ok, err := wait(ctx)
		answered <- settled{ok, err}
	}()
	guard := time.NewTimer(hangAfter)
	defer guard.Stop()
	select {
	case <-ctx.waiting:
	case a := <-answered:
		h.t.Fatalf("%s returned %+v without waiting", what, a)
	case <-guard.C:
		h.t.Fatalf("%s neither waits nor returns after %v", what, hangAfter)
	}
	return answered
}

func (h *harness) wantExpiry(id, expiry int64) {
	h.t.Helper()
	if l, ok := h.p.lookup(id); !ok || l.Expiry != expiry {
		h.t.Fatalf("lease %d in the table: %+v (present %v), want expiry %d", id, l, ok, expiry)
	}
}

func (h *harness) wantGone(id int64) {
	h.t.Helper()
	if l, ok := h.p.lookup(id); ok {
		h.t.Fatalf("lease %d still in the table: %+v", id, l)
	}
}

func TestSchedulerExpiresDueLeasesOnly(t *testing.T) {
	h := start(t, false)
	h.step(tick)
	h.wantProposed(firstCheckpoint)
	// One step across 48 ticks wakes the scheduler once, and it
	// checkpoints once; lease 1 is a millisecond from its deadline.
	h.step(4899 * time.Millisecond)
	h.wantProposed(checkpoint(4999, nil))
	h.wantWaitingUntil(5 * time.Second) // the next tick and lease 1's deadline
	h.wantLag(0, 0)
	h.step(time.Millisecond)
	h.wantProposed(expire(1), checkpoint(5000, nil))
	h.wantGone(1)
	h.wantExpiry(2, 10000)
	h.wantLag(1, 0)
}

// The scheduler wakes for ticks and deadlines only: over 12 s of fake time
// stepped in half ticks it waits once per tick, and each wake proposes
// exactly what is due. (Before the clock seam, the loop woke about 26,000
// times in 20 ms of real time with the fake clock standing still.)
func TestSchedulerWakesOncePerTick(t *testing.T) {
	h := start(t, false)
	_, made := h.clock.timers()
	for i := int64(1); i <= 120; i++ {
		h.step(tick / 2)
		if _, m := h.clock.timers(); m != made {
			t.Fatalf("half a tick after tick %d: the scheduler woke %d times", i-1, m-made)
		}
		h.wantProposed()
		h.step(tick / 2)
		if _, m := h.clock.timers(); m != made+1 {
			t.Fatalf("at tick %d the scheduler woke %d times, want once", i, m-made)
		}
		made++
		h.wantWaitingUntil(time.Duration(i+1) * tick)
		clock := i * 100
		switch {
		case i == 1:
			h.wantProposed(firstCheckpoint)
		case i == 50:
			h.wantProposed(expire(1), checkpoint(clock, nil))
		case i == 100:
			// No checkpointed lease is left: the lease clock stops.
			h.wantProposed(expire(2))
		case i < 100:
			h.wantProposed(checkpoint(clock, nil))
		default:
			h.wantProposed()
		}
	}
}

// The batch carrying a keep-alive's reset is proposed at once, not at the
// next tick, and AwaitCheckpoint reports whether it committed: a
// keep-alive is acknowledged only then (rule 1 of package lease), since
// the next leader would restart the lease from the checkpoint the reset
// undoes.
func TestAwaitCheckpointSettlesWithTheReset(t *testing.T) {
	for _, tc := range []struct {
		name       string
		verdict    error
		want       settled
		wantExpiry int64
	}{
		{"committed", nil, settled{ok: true}, 0},
		{"failed", errors.New("leadership lost"), settled{ok: false}, 10000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, true)
			h.clock.advance(tick)
			h.next(firstCheckpoint).verdict <- nil
			h.clock.awaitPending(t, 1)
			r := h.s.tr.Renew(2)
			if r.TTL != 10 || r.ResetSeq == 0 {
				t.Fatalf("renewal of a checkpointed lease: %+v, want TTL 10 and a reset", r)
			}
			answered := h.await("AwaitCheckpoint", func(ctx context.Context) (bool, error) {
				return h.s.AwaitCheckpoint(ctx, r.ResetSeq)
			})
			// The scheduler proposes the reset at once, on the lease
			// clock's current value.
			reset := h.next(checkpoint(100, []int64{2}))
			h.wantExpiry(2, 10000)
			reset.verdict <- tc.verdict
			if a := recv(t, answered, "answer"); a != tc.want {
				t.Fatalf("AwaitCheckpoint: %+v, want %+v", a, tc.want)
			}
			h.wantExpiry(2, tc.wantExpiry)
			h.clock.awaitPending(t, 1)
			h.wantWaitingUntil(2 * tick)
		})
	}
}

func TestDemotionStopsAllProposals(t *testing.T) {
	h := start(t, false)
	h.step(tick)
	h.wantProposed(firstCheckpoint)
	h.stop()
	// Run has returned and left no timer behind: nothing can wake it.
	if d, _ := h.clock.timers(); len(d) != 0 {
		t.Fatalf("timers pending after demotion, due at t0+%v", sinceT0(h.t0, d))
	}
	h.clock.advance(time.Minute)
	h.wantProposed()
	h.wantExpiry(1, 5000)
	// The demoted tracker forgot every lease: a wait for one ends at once,
	// saying no expiry applied.
	if expired, err := h.s.AwaitExpiry(context.Background(), 2); expired || err != nil {
		t.Fatalf("AwaitExpiry on a demoted scheduler: %v %v, want false", expired, err)
	}
}

// A failed expiry is retried after expireRetry on the scheduler's clock,
// not before, and the lag it adds is measured on that clock.
func TestFailedExpiryRetriesAfterBackoff(t *testing.T) {
	h := start(t, true)
	h.clock.advance(5 * time.Second) // lease 1 is due; the first tick is overdue
	h.next(expire(1)).verdict <- errors.New("no quorum")
	h.clock.awaitPending(t, 1)
	h.wantWaitingUntil(5*time.Second + expireRetry)
	_, made := h.clock.timers()
	h.clock.advance(expireRetry - time.Millisecond)
	if _, m := h.clock.timers(); m != made {
		t.Fatal("the scheduler woke before its back-off ended")
	}
	select {
	case hp := <-h.p.hold:
		t.Fatalf("proposed %s during the back-off", describe([]any{hp.entry}))
	default:
	}
	h.clock.advance(time.Millisecond)
	// The overdue tick checkpoints lease 1 too, at its deadline (now: the
	// lease clock reads 5050), then the retry expires it.
	h.next(checkpoint(5050, nil, lease.Expiry{ID: 1, Expiry: 5050}, lease.Expiry{ID: 2, Expiry: 10000})).verdict <- nil
	h.next(expire(1)).verdict <- nil
	h.clock.awaitPending(t, 1)
	h.wantWaitingUntil(5100 * time.Millisecond)
	h.wantGone(1)
	h.wantLag(1, expireRetry.Seconds())
}

// AwaitExpiry of a lease whose time is up returns only once the expiry
// has applied: before that its keys are still there, and a keep-alive
// answered "gone" meanwhile would let a read see a lease the holder was
// told is gone.
func TestAwaitExpiryReturnsOnceTheExpiryApplies(t *testing.T) {
	h := start(t, true)
	h.clock.advance(5 * time.Second) // lease 1 (TTL 5) is due
	expiry := h.next(expire(1))
	if r := h.s.tr.Renew(1); !r.Due || r.TTL != 0 {
		t.Fatalf("renewal of a due lease: %+v, want Due and no TTL", r)
	}
	answered := h.await("AwaitExpiry", func(ctx context.Context) (bool, error) { return h.s.AwaitExpiry(ctx, 1) })
	h.wantExpiry(1, 0)
	expiry.verdict <- nil
	if a := recv(t, answered, "answer"); !a.ok || a.err != nil {
		t.Fatalf("AwaitExpiry of an expired lease: %+v, want true", a)
	}
	h.wantGone(1)
	h.next(checkpoint(5000, nil, lease.Expiry{ID: 2, Expiry: 10000})).verdict <- nil
	h.clock.awaitPending(t, 1)
	h.wantWaitingUntil(5100 * time.Millisecond)
}

// If leadership goes while AwaitExpiry waits, it returns false, so the
// keep-alive fails as "not leader" and the client asks the next leader
// instead of hearing "gone" from one that could not make it so.
func TestAwaitExpiryFailsOnDemotion(t *testing.T) {
	h := start(t, true)
	h.clock.advance(5 * time.Second)
	h.next(expire(1)) // never answered
	answered := h.await("AwaitExpiry", func(ctx context.Context) (bool, error) { return h.s.AwaitExpiry(ctx, 1) })
	h.stop()
	if a := recv(t, answered, "answer after demotion"); a.ok || a.err != nil {
		t.Fatalf("AwaitExpiry after demotion: %+v, want false", a)
	}
	h.wantExpiry(1, 0)
}

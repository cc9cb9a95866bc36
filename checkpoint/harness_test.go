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

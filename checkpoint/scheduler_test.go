package checkpoint

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/corenode/corenode/lease"
)

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

// A batch that failed stays failed for its waiter when a later batch
// applies: its resets were lost with it.
func TestAwaitCheckpointAnswersForItsOwnBatch(t *testing.T) {
	s := New(nil, nil, Config{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.settle(4, true)
	s.settle(5, false)
	s.settle(6, true)
	for seq, want := range map[uint64]bool{4: true, 5: false, 6: true} {
		got, err := s.AwaitCheckpoint(context.Background(), seq)
		if err != nil || got != want {
			t.Errorf("AwaitCheckpoint(%d) = %v, %v; want %v", seq, got, err, want)
		}
	}
}

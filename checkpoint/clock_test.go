package checkpoint

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/corenode/corenode/lease"
)

// hangAfter bounds every wait of a test on the scheduler, so a broken
// scheduler fails the test instead of hanging it. It is a guard, never a
// measurement: a passing test never comes near it.
const hangAfter = 10 * time.Second

// fakeClock is a lease.Clock whose time moves only when the test calls
// advance. advance fires every timer due by the new time, earliest first,
// before it returns, so every wake-up of the scheduler is decided by the
// test's steps.
//
// It counts the timers pending (made, neither fired nor stopped). The
// scheduler stops its timer before it does any work and makes a new one
// to wait on, so one pending timer means it is idle: blocked until that
// timer fires or something else wakes it. awaitPending waits for that on a
// channel, never by polling.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	pending []*fakeTimer
	made    int           // timers made: one per wait of the scheduler
	changed chan struct{} // closed and replaced whenever pending changes
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, changed: make(chan struct{})}
}

type fakeTimer struct {
	c  *fakeClock
	at time.Time
	ch chan time.Time // holds the one value a fired timer delivers
}

// Now implements lease.Clock.
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements lease.Clock.
func (c *fakeClock) NewTimer(d time.Duration) lease.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.made++
	t := &fakeTimer{c: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.pending = append(c.pending, t)
	c.changedLocked()
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// Stop implements lease.Timer, draining a value delivered but not received
// as the contract asks.
func (t *fakeTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-t.ch:
	default:
	}
	i := slices.Index(c.pending, t)
	if i < 0 {
		return false
	}
	c.pending = slices.Delete(c.pending, i, i+1)
	c.changedLocked()
	return true
}

func (c *fakeClock) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// advance moves the clock by d and fires the timers due by then.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	slices.SortStableFunc(c.pending, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	n := 0
	for n < len(c.pending) && !c.pending[n].at.After(c.now) {
		c.pending[n].ch <- c.now
		n++
	}
	if n > 0 {
		c.pending = slices.Delete(c.pending, 0, n)
		c.changedLocked()
	}
}

// timers reports the deadlines of the pending timers, earliest first, and
// how many timers were ever made.
func (c *fakeClock) timers() (deadlines []time.Time, made int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.pending {
		deadlines = append(deadlines, t.at)
	}
	slices.SortFunc(deadlines, time.Time.Compare)
	return deadlines, c.made
}

// awaitPending returns once exactly n timers are pending.
func (c *fakeClock) awaitPending(t *testing.T, n int) {
	t.Helper()
	guard := time.NewTimer(hangAfter)
	defer guard.Stop()
	for {
		c.mu.Lock()
		got, changed := len(c.pending), c.changed
		c.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-changed:
		case <-guard.C:
			t.Fatalf("%d timers pending after %v, want %d", got, hangAfter, n)
		}
	}
}

// TestFakeClockFiresDueTimersInOrder checks the fake the scheduler tests
// rely on.
func TestFakeClockFiresDueTimersInOrder(t *testing.T) {
	t0 := time.Unix(100, 0)
	c := newFakeClock(t0)
	late, early, stopped := c.NewTimer(2*time.Second), c.NewTimer(time.Second), c.NewTimer(time.Second)
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop of a pending timer must report true once")
	}
	now := c.NewTimer(0)
	if got := <-now.C(); !got.Equal(t0) {
		t.Fatalf("a timer of 0 delivered %v, want %v at once", got, t0)
	}
	if d, made := c.timers(); !slices.Equal(d, []time.Time{t0.Add(time.Second), t0.Add(2 * time.Second)}) || made != 4 {
		t.Fatalf("pending %v, made %d", d, made)
	}
	c.advance(time.Second - 1)
	select {
	case v := <-early.C():
		t.Fatalf("fired at %v, a nanosecond early", v)
	default:
	}
	c.advance(1)
	if got := <-early.C(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("fired with %v", got)
	}
	c.advance(time.Hour)
	if late.Stop() {
		t.Fatal("Stop of a fired timer reported true")
	}
	select {
	case v := <-late.C():
		t.Fatalf("a stopped timer delivered %v", v)
	default:
	}
	c.awaitPending(t, 0)
}

package member_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/corenode/corenode/lease"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// stepClock is a lease.Clock that moves only when the test steps it.
type stepClock struct {
	mu      sync.Mutex
	now     time.Time
	pending []*stepTimer
}

type stepTimer struct {
	c  *stepClock
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
	t := &stepTimer{c: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
	} else {
		c.pending = append(c.pending, t)
	}
	return t
}

// step moves the clock by d and fires every timer then due.
func (c *stepClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.pending = slices.DeleteFunc(c.pending, func(t *stepTimer) bool {
		if t.at.After(c.now) {
			return false
		}
		t.ch <- c.now
		return true
	})
}

func (t *stepTimer) C() <-chan time.Time { return t.ch }

func (t *stepTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-t.ch:
	default:
	}
	n := len(c.pending)
	c.pending = slices.DeleteFunc(c.pending, func(p *stepTimer) bool { return p == t })
	return len(c.pending) < n
}

// The leader measures leases on Config.LeaseClock, not on the process's
// clock: jepsen-lite's clock-rate fault depends on it, since a member whose
// tracker or scheduler read the real clock would run at the real rate
// whatever rate the fault gave it.
func TestLeaseClockMeasuresLeases(t *testing.T) {
	clk := &stepClock{now: time.Unix(5000, 0)}
	c := membertest.New(t, 1, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.LeaseClock = clk }))
	ctx := ctxT(t)
	cli := c.Client()
	g, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	ttl := func() int64 {
		t.Helper()
		r, err := cli.TimeToLive(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		return r.TTL
	}
	if got := ttl(); got != 10 {
		t.Fatalf("TTL = %d right after the grant on a clock that has not moved, want 10", got)
	}
	clk.step(6 * time.Second)
	if got := ttl(); got != 4 {
		t.Fatalf("TTL = %d after 6 s on the lease clock, want 4", got)
	}
	clk.step(4*time.Second - time.Nanosecond)
	if got := ttl(); got != 0 {
		t.Fatalf("TTL = %d 1 ns before the deadline, want 0 (rounded down)", got)
	}
	if r, err := cli.TimeToLive(ctx, g.ID); err != nil || r.TTL == -1 {
		t.Fatalf("lease gone 1 ns before its deadline on the lease clock: %+v %v", r, err)
	}
	clk.step(time.Nanosecond)
	// The expiry is a raft proposal; it applies soon after the scheduler's
	// timer fires.
	membertest.Eventually(t, 10*time.Second, func() bool { return ttl() == -1 }, "lease expired once the lease clock reached its deadline")
}

package lease

import "time"

// Clock is the leader's monotonic clock, the one lease deadlines are
// measured on. The Tracker reads it; the checkpoint scheduler that drives
// the tracker waits on it (Tracker.Clock), so a deadline is waited for on
// the clock that set it and a test that steps a fake clock steps both.
//
// Implementations are safe for concurrent use by any number of goroutines.
// Now never goes backwards: the production clock, SystemClock, uses
// time.Now's monotonic reading, so a step of the wall clock moves no
// deadline.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once at least d has passed on
	// this clock, measured from the call; at once if d <= 0.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot wake-up from a Clock. Its methods may be called from
// any goroutine.
type Timer interface {
	// C delivers the clock's time once, when the timer fires. The value
	// waits in C until it is received or the timer is stopped.
	C() <-chan time.Time
	// Stop cancels the timer and reports whether it had not fired yet.
	// After Stop returns, nothing is received from C, so a goroutine that
	// stops a timer it no longer waits on never sees a stale wake-up.
	Stop() bool
}

// SystemClock is the production Clock: time.Now and the runtime's timers,
// both monotonic.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer implements Clock. Since Go 1.23 a stopped runtime timer delivers
// no stale value, which is the Timer contract.
func (SystemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

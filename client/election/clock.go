package election

import "time"

// Clock is the monotonic clock a holder measures its lease on (WithClock).
// The timing logic reads time and sets timers only through it, so unit
// tests step a fake clock and assert the exact instant leadership ends.
// The real clock's readings carry Go's monotonic reading, so comparisons
// and differences never follow a wall-clock step.
type Clock interface {
	Now() time.Time
	// At calls f in its own goroutine once the clock reads t or later (at
	// once if it already does). An absolute instant, not a duration, so a
	// fake clock stepped between a caller's Now and its timer cannot move
	// the timer.
	At(t time.Time, f func()) Stopper
}

// Stopper cancels a pending At; it reports whether it stopped it.
type Stopper interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) At(t time.Time, f func()) Stopper { return time.AfterFunc(time.Until(t), f) }

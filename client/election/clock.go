package election

import "time"

// clock is where the timing logic reads time and sets timers, so unit tests
// step a fake clock and assert the exact instant leadership ends. The real
// clock's readings carry Go's monotonic reading, so comparisons and
// differences never follow a wall-clock step.
type clock interface {
	Now() time.Time
	// At calls f in its own goroutine once the clock reads t or later (at
	// once if it already does). An absolute instant, not a duration, so a
	// fake clock stepped between a caller's Now and its timer cannot move
	// the timer.
	At(t time.Time, f func()) stopper
}

// stopper cancels a pending At; it reports whether it stopped it.
type stopper interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) At(t time.Time, f func()) stopper { return time.AfterFunc(time.Until(t), f) }

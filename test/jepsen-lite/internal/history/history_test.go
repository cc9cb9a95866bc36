package history

import (
	"testing"
	"time"
)

// A CLOCK_MONOTONIC reading lands where the run's clock says it was read:
// between the run-clock readings around it, give or take the
// uncertainty of NewClock's bracket (microseconds; a millisecond allowed).
func TestFromMonoMatchesNow(t *testing.T) {
	c := NewClock()
	time.Sleep(20 * time.Millisecond) // so the offset is not the clock's start
	const slack = int64(time.Millisecond)
	for range 100 {
		before := c.Now()
		got := c.FromMono(Mono())
		after := c.Now()
		if got < before-slack || got > after+slack {
			t.Fatalf("FromMono(Mono()) = %d, read between Now() = %d and %d", got, before, after)
		}
	}
}

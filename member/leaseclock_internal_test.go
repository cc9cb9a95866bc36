package member

import (
	"testing"
	"time"

	"github.com/corenode/corenode/lease"
)

type namedClock struct{ lease.SystemClock }

// The read-lease manager measures on the same clock as the expiry tracker
// (TestLeaseClockMeasuresLeases): one rate for every promise a member makes.
func TestReadLeasesOnTheLeaseClock(t *testing.T) {
	clk := &namedClock{}
	if got := readLeaseConfig(Config{LeaseClock: clk}, nil).Clock; got != lease.Clock(clk) {
		t.Fatalf("read-lease clock = %#v, want Config.LeaseClock", got)
	}
	if got := readLeaseConfig(Config{ElectionTimeout: time.Second}, nil).Clock; got != (lease.SystemClock{}) {
		t.Fatalf("read-lease clock without Config.LeaseClock = %#v, want lease.SystemClock", got)
	}
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/corenode/corenode/internal/rateclock"
	"github.com/corenode/corenode/lease"
)

// testClock is the member's lease clock when rateclock.Env
// (CORENODE_TEST_CLOCK_RATE) is set, and nil (the real clock) when it is
// not. The variable is for tests only, not a user setting, and has no
// flag: jepsen-lite's clock-rate fault sets it to make this member's lease
// deadlines, checkpoint ticks and read leases run at another rate than its
// holders' clocks, and changes the rate during a run through the file it
// names. A real member's clock rate is not something to choose.
func testClock(ctx context.Context, logger *slog.Logger) (lease.Clock, error) {
	v := os.Getenv(rateclock.Env)
	c, err := rateclock.FromEnv(ctx, v, func(err error) {
		logger.Error("test clock: cannot read the rate; it stays as it was", "err", err)
	})
	if err != nil {
		return nil, fmt.Errorf("test clock: %w", err)
	}
	if c == nil {
		return nil, nil
	}
	logger.Warn("lease clock at a test rate: for tests only", "var", rateclock.Env, "value", v, "rate", c.Rate())
	return leaseClock{c}, nil
}

// leaseClock is a rate clock as a lease.Clock.
type leaseClock struct{ *rateclock.Clock }

func (c leaseClock) NewTimer(d time.Duration) lease.Timer { return c.Clock.NewTimer(d) }

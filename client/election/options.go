package election

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/corenode/corenode/internal/drift"
)

// DefaultTTL is the lease TTL when WithTTL is not given: long enough that
// a leader change of the cluster (about a second) or a short network blip
// does not cost a healthy holder its leadership, short enough that a holder
// that died is replaced within seconds.
const DefaultTTL = 10 * time.Second

// DefaultDriftMargin is the margin used when WithDriftMargin is not given:
// 1% of the TTL plus 50 ms, the margin every part of corenode uses
// (client/cache's default, and the leader's wait for its predecessors'
// read leases).
//
// The margin is the only slack between the holder's deadline and the
// issuer's: the holder starts its deadline when it sends a keep-alive, the
// issuer when it processes it, later, and the issuer never expires early.
// What is left is that the two measure the TTL on different clocks; why 1%
// and 50 ms cover that (and the delay before a consumer of Done, such as
// the `corenode lock` supervisor, acts on it) is explained at
// internal/drift.Margin.
func DefaultDriftMargin(ttl time.Duration) time.Duration {
	return drift.Margin(ttl)
}

// Option configures Campaign and Lock.
type Option func(*config)

// WithTTL sets the lease TTL (rounded up to whole seconds, as leases are
// granted in seconds). The issuer may raise it: corenode raises TTLs below
// its minimum (1.5 election timeouts), and the holder then times its
// deadline on the TTL the issuer answered.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithDriftMargin sets how long before the issuer's earliest possible
// expiry the holder stops leading (default: DefaultDriftMargin of the TTL).
// It must be shorter than the TTL; zero leaves no room for drift.
func WithDriftMargin(m time.Duration) Option {
	return func(c *config) { c.margin, c.marginSet = m, true }
}

// WithLogger sets where the holder logs renewals that failed and the end of
// its leadership (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithOnRenew calls f with the new deadline (as Leadership.Deadline) each
// time a keep-alive moves it on, from the goroutine that renews the lease,
// one call at a time and in order; f must not block. `corenode lock` uses it
// to hand each deadline to a watchdog process that stops CMD on its own.
func WithOnRenew(f func(deadline time.Time)) Option { return func(c *config) { c.onRenew = f } }

// WithClock replaces the process's monotonic clock, which the holder
// measures its lease on, with c; Leadership.Deadline and WithOnRenew's
// deadlines are then c's readings. It is for tests: corenode's jepsen-lite
// runs holders on clocks of different rates to exercise the drift margin.
// A holder in production keeps the default: the margin assumes a real
// clock.
func WithClock(c Clock) Option { return func(cfg *config) { cfg.clock = c } }

// withRenewHook is called after each keep-alive answer (or failure) has
// been applied, so unit tests know when to step the clock next.
func withRenewHook(f func(error)) Option { return func(c *config) { c.renewed = f } }

type config struct {
	ttl       time.Duration
	margin    time.Duration
	marginSet bool
	clock     Clock
	log       *slog.Logger
	renewed   func(error)
	onRenew   func(time.Time)
}

func newConfig(opts []Option) (config, error) {
	c := config{ttl: DefaultTTL, clock: realClock{}, log: slog.Default()}
	for _, o := range opts {
		o(&c)
	}
	if c.clock == nil {
		return c, fmt.Errorf("election: nil clock")
	}
	if c.ttl <= 0 {
		return c, fmt.Errorf("election: TTL %v is not positive", c.ttl)
	}
	if r := c.ttl % time.Second; r != 0 {
		c.ttl += time.Second - r
	}
	if !c.marginSet {
		c.margin = DefaultDriftMargin(c.ttl)
	}
	if c.margin < 0 || c.margin >= c.ttl {
		return c, fmt.Errorf("election: drift margin %v is not in [0, TTL %v)", c.margin, c.ttl)
	}
	if c.renewed == nil {
		c.renewed = func(error) {}
	}
	if c.onRenew == nil {
		c.onRenew = func(time.Time) {}
	}
	return c, nil
}

// marginFor is the margin for a TTL the issuer answered, which can be
// longer than the one asked for: a default margin grows with it.
func (c *config) marginFor(ttl time.Duration) time.Duration {
	if c.marginSet {
		return c.margin
	}
	return DefaultDriftMargin(ttl)
}

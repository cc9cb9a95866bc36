package cache

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/corenode/corenode/internal/drift"
)

// DefaultMaxKeys is how many keys a Cache holds when WithMaxKeys is not
// given.
const DefaultMaxKeys = 10000

// DefaultDriftMargin is the margin used when WithDriftMargin is not given,
// computed from the lease the leader answered: 1% of it plus 50 ms, the
// margin every part of corenode uses (client/election's default, and the
// leader's wait for its predecessors' read leases).
//
// The margin is the only slack between the cache's deadline and the
// leader's: the cache starts a lease when it sends the request, the leader
// when it grants it, later, and the leader never lets a write through
// before its own deadline unless the cache has said it dropped the key.
// What is left is that the two measure the lease on different clocks; why
// 1% and 50 ms cover that is explained at internal/drift.Margin.
func DefaultDriftMargin(lease time.Duration) time.Duration {
	return drift.Margin(lease)
}

// Option configures New.
type Option func(*config)

// WithDriftMargin sets how long before the leader's earliest possible
// expiry of a read lease the cache stops serving the value (default:
// DefaultDriftMargin of each lease answered). A margin as long as the
// lease, or longer, caches nothing; zero leaves no room for clock drift.
func WithDriftMargin(m time.Duration) Option {
	return func(c *config) { c.margin, c.marginSet = m, true }
}

// WithMaxKeys bounds how many keys the cache holds (default
// DefaultMaxKeys). Past it, the least recently used entry is dropped:
// dropping a value early is always safe, it only costs a round trip to the
// leader the next time.
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

// WithLogger sets where the cache logs why its session goes through a
// member other than the leader (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithClock replaces the process's monotonic clock, which the cache
// judges its leases by, with clk. It is for tests: corenode's jepsen-lite
// runs caches on clocks of different rates to exercise the drift margin.
// A cache in production keeps the default: the margin assumes a real
// clock.
func WithClock(clk Clock) Option { return func(c *config) { c.clock = clk } }

// withWaitHook is called with the key each time a Get starts waiting for
// the leader's answer (having sent or joined a request), so unit tests know
// a Get is blocked without polling.
func withWaitHook(f func(key string)) Option { return func(c *config) { c.waiting = f } }

type config struct {
	margin    time.Duration
	marginSet bool
	maxKeys   int
	clock     Clock
	waiting   func(key string)
	logger    *slog.Logger
}

func newConfig(opts []Option) (config, error) {
	c := config{maxKeys: DefaultMaxKeys, clock: realClock{}, logger: slog.Default()}
	for _, o := range opts {
		o(&c)
	}
	if c.marginSet && c.margin < 0 {
		return c, fmt.Errorf("cache: drift margin %v is negative", c.margin)
	}
	if c.maxKeys <= 0 {
		return c, fmt.Errorf("cache: max keys %d is not positive", c.maxKeys)
	}
	if c.clock == nil {
		return c, fmt.Errorf("cache: nil clock")
	}
	if c.logger == nil {
		return c, fmt.Errorf("cache: nil logger")
	}
	if c.waiting == nil {
		c.waiting = func(string) {}
	}
	return c, nil
}

// marginFor is the margin for a lease the leader answered: a default
// margin grows with the lease, as the drift it covers does.
func (c *config) marginFor(lease time.Duration) time.Duration {
	if c.marginSet {
		return c.margin
	}
	return DefaultDriftMargin(lease)
}

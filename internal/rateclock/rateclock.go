// Package rateclock is a monotonic clock that runs at a settable rate
// against another one. It exists for tests only: jepsen-lite's clock-rate
// fault runs each member's lease clock and each holder's clock at a rate of
// its own, to exercise the drift margin (internal/drift), which no test on
// one machine's one clock can. Nothing a user sets reaches it: a member
// builds one only from the test-only variable Env.
//
// At rate r, a span s of the base clock reads as s*r. A change of rate
// rebases: the clock reads t'0 + (t - t0)*r from the base reading t0 and
// its own reading t'0 at the change, so it never jumps and never goes
// backwards, whatever the rates.
//
// It is a leaf (standard library only), so the member (through lease.Clock),
// client/election and client/cache (through their WithClock options) and
// jepsen-lite can all use it.
package rateclock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Env is the test-only variable that gives a process a rate clock:
// "1.002" runs it at that rate; "file:PATH" reads the rate from PATH, and
// reads it again every PollEvery, so a test can change it during a run.
// A process in production never sets it.
const Env = "CORENODE_TEST_CLOCK_RATE"

// PollEvery is how often a clock that follows a file reads it again.
const PollEvery = 50 * time.Millisecond

// ErrRate is returned for a rate outside [MinRate, MaxRate].
var ErrRate = errors.New("rateclock: rate out of range")

// The rates a clock accepts: far wider than any real clock's error, but
// narrow enough that a typo (a percentage for a rate) is refused.
const (
	MinRate = 0.5
	MaxRate = 2.0
)

// Base is the clock a rate clock runs against.
type Base interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) BaseTimer
}

// BaseTimer is a pending AfterFunc of a Base.
type BaseTimer interface{ Stop() bool }

// System is the process's own monotonic clock.
type System struct{}

// Now implements Base.
func (System) Now() time.Time { return time.Now() }

// AfterFunc implements Base.
func (System) AfterFunc(d time.Duration, f func()) BaseTimer { return time.AfterFunc(d, f) }

// Clock runs at a rate against its base. It is safe for concurrent use.
type Clock struct {
	base Base

	mu     sync.Mutex
	rate   float64
	t0, s0 time.Time // base and own readings at the last change of rate
	timers map[*Timer]struct{}
}

// New returns a clock that reads the base's time now and runs at rate
// from there.
func New(base Base, rate float64) (*Clock, error) {
	if err := check(rate); err != nil {
		return nil, err
	}
	now := base.Now()
	return &Clock{base: base, rate: rate, t0: now, s0: now, timers: map[*Timer]struct{}{}}, nil
}

func check(rate float64) error {
	if math.IsNaN(rate) || rate < MinRate || rate > MaxRate {
		return fmt.Errorf("%w: %v is not in [%v, %v]", ErrRate, rate, MinRate, MaxRate)
	}
	return nil
}

// Now reads the clock. Its readings carry the base's monotonic reading,
// so differences between them never follow a step of the wall clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *Clock) nowLocked() time.Time { return c.at(c.base.Now()) }

// at is the clock's reading when the base reads b.
func (c *Clock) at(b time.Time) time.Time {
	return c.s0.Add(time.Duration(math.Round(float64(b.Sub(c.t0)) * c.rate)))
}

// Rate is the clock's rate.
func (c *Clock) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rate
}

// SetRate changes the rate from now on. Pending timers are set again, so
// that each fires when the clock reaches its instant at the new rate.
func (c *Clock) SetRate(rate float64) error {
	if err := check(rate); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rate == c.rate {
		return nil
	}
	b := c.base.Now()
	c.s0, c.t0, c.rate = c.at(b), b, rate
	for t := range c.timers {
		t.base.Stop()
		c.armLocked(t)
	}
	return nil
}

// Timer fires once the clock reads its instant or later. Its methods may
// be called from any goroutine.
type Timer struct {
	c    *Clock
	at   time.Time
	ch   chan time.Time // NewTimer's; nil for At's
	f    func()         // At's
	base BaseTimer      // guarded by c.mu
	done bool           // fired or stopped; guarded by c.mu
}

// NewTimer returns a timer that delivers the clock's time on C once d has
// passed on this clock (at once if d <= 0). It is lease.Timer's contract:
// after Stop returns, nothing is received from C.
func (c *Clock) NewTimer(d time.Duration) *Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &Timer{c: c, at: c.nowLocked().Add(d), ch: make(chan time.Time, 1)}
	c.armLocked(t)
	return t
}

// At calls f in its own goroutine once the clock reads at or later.
func (c *Clock) At(at time.Time, f func()) *Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &Timer{c: c, at: at, f: f}
	c.armLocked(t)
	return t
}

// armLocked sets t's base timer for the base time the clock needs to reach
// t.at at its rate. Rounded up, and checked again when it fires: rounding
// must not make a timer fire before its instant, which for a lease would be
// an early end.
func (c *Clock) armLocked(t *Timer) {
	c.timers[t] = struct{}{}
	left := t.at.Sub(c.nowLocked())
	d := time.Duration(math.Ceil(float64(left) / c.rate))
	t.base = c.base.AfterFunc(max(d, 0), t.fire)
}

func (t *Timer) fire() {
	c := t.c
	c.mu.Lock()
	if t.done {
		c.mu.Unlock()
		return
	}
	now := c.nowLocked()
	if now.Before(t.at) {
		c.armLocked(t)
		c.mu.Unlock()
		return
	}
	t.done = true
	delete(c.timers, t)
	if t.ch != nil {
		// Under c.mu, so that a Stop that returns after this has drained it.
		t.ch <- now
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	t.f()
}

// C delivers the clock's time once, when a NewTimer fires; nil for At's.
func (t *Timer) C() <-chan time.Time { return t.ch }

// Stop cancels the timer and reports whether it had not fired yet. After
// it returns nothing is received from C.
func (t *Timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	if t.done {
		return false
	}
	t.done = true
	delete(c.timers, t)
	t.base.Stop()
	return true
}

// Source is where Env says the rate comes from.
type Source struct {
	Rate float64 // when File is ""
	File string
}

// ParseEnv reads Env's value: a rate, or "file:PATH".
func ParseEnv(v string) (Source, error) {
	if path, ok := strings.CutPrefix(v, "file:"); ok {
		if path == "" {
			return Source{}, fmt.Errorf("%s=%q: no file named", Env, v)
		}
		return Source{File: path}, nil
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return Source{}, fmt.Errorf("%s=%q: neither a rate nor file:PATH: %w", Env, v, err)
	}
	if err := check(r); err != nil {
		return Source{}, fmt.Errorf("%s=%q: %w", Env, v, err)
	}
	return Source{Rate: r}, nil
}

// ReadRate reads a rate file: one number, surrounding space ignored.
func ReadRate(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("rateclock: read the rate: %w", err)
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		return 0, fmt.Errorf("rateclock: rate file %s: %w", path, err)
	}
	if err := check(r); err != nil {
		return 0, fmt.Errorf("rateclock: rate file %s: %w", path, err)
	}
	return r, nil
}

// WriteRate replaces a rate file at once (a rename, so a reader never sees
// half a number).
func WriteRate(path string, rate float64) error {
	if err := check(rate); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatFloat(rate, 'g', -1, 64)+"\n"), 0o644); err != nil {
		return fmt.Errorf("rateclock: write the rate: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rateclock: write the rate: %w", err)
	}
	return nil
}

// Reload sets the rate to what the file says now.
func (c *Clock) Reload(path string) error {
	r, err := ReadRate(path)
	if err != nil {
		return err
	}
	return c.SetRate(r)
}

// FromEnv is the clock Env's value v asks for, on the process's own clock:
// nil when v is empty. A clock that follows a file reads it now (an error
// if it cannot) and then every PollEvery until ctx ends, calling onErr
// with each failed read; the rate stays as it was until a read succeeds.
func FromEnv(ctx context.Context, v string, onErr func(error)) (*Clock, error) {
	if v == "" {
		return nil, nil
	}
	src, err := ParseEnv(v)
	if err != nil {
		return nil, err
	}
	rate := src.Rate
	if src.File != "" {
		if rate, err = ReadRate(src.File); err != nil {
			return nil, fmt.Errorf("%s: %w", Env, err)
		}
	}
	c, err := New(System{}, rate)
	if err != nil {
		return nil, err
	}
	if src.File != "" {
		go c.follow(ctx, src.File, onErr)
	}
	return c, nil
}

// follow polls on real time, not on the clock: how soon a change of rate
// is seen decides nothing, and a fast poll under a slow rate would be
// pointless.
func (c *Clock) follow(ctx context.Context, path string, onErr func(error)) {
	t := time.NewTicker(PollEvery)
	defer t.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := c.Reload(path)
		if err != nil && onErr != nil && (last == nil || err.Error() != last.Error()) {
			onErr(err)
		}
		last = err
	}
}

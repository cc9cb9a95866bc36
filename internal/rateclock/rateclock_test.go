package rateclock

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"
)

// fakeBase is a base clock that moves only when stepped; Step runs the
// functions that fall due, in order, in the stepping goroutine.
type fakeBase struct {
	mu      sync.Mutex
	now     time.Time
	pending []*fakeTimer
}

type fakeTimer struct {
	b       *fakeBase
	at      time.Time
	f       func()
	stopped bool
}

func newFakeBase() *fakeBase { return &fakeBase{now: time.Unix(1000, 0)} }

func (b *fakeBase) Now() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now
}

func (b *fakeBase) AfterFunc(d time.Duration, f func()) BaseTimer {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := &fakeTimer{b: b, at: b.now.Add(d), f: f}
	b.pending = append(b.pending, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Step moves the base by d, firing what falls due on the way at its own
// instant.
func (b *fakeBase) Step(d time.Duration) {
	b.mu.Lock()
	end := b.now.Add(d)
	for {
		sort.SliceStable(b.pending, func(i, j int) bool { return b.pending[i].at.Before(b.pending[j].at) })
		var next *fakeTimer
		for len(b.pending) > 0 && next == nil {
			if t := b.pending[0]; t.stopped {
				b.pending = b.pending[1:]
			} else if !t.at.After(end) {
				next, b.pending = t, b.pending[1:]
				next.stopped = true
			} else {
				break
			}
		}
		if next == nil {
			b.now = end
			b.mu.Unlock()
			return
		}
		b.now = next.at
		b.mu.Unlock()
		next.f()
		b.mu.Lock()
	}
}

func newClock(t *testing.T, rate float64) (*Clock, *fakeBase, time.Time) {
	t.Helper()
	b := newFakeBase()
	c, err := New(b, rate)
	if err != nil {
		t.Fatal(err)
	}
	return c, b, b.Now()
}

func expectNow(t *testing.T, c *Clock, want time.Time) {
	t.Helper()
	if got := c.Now(); !got.Equal(want) {
		t.Fatalf("Now = start%+v, want start%+v", got.Sub(time.Unix(1000, 0)), want.Sub(time.Unix(1000, 0)))
	}
}

func TestRate(t *testing.T) {
	c, b, start := newClock(t, 1.5)
	expectNow(t, c, start)
	b.Step(10 * time.Second)
	expectNow(t, c, start.Add(15*time.Second))
	b.Step(time.Millisecond)
	expectNow(t, c, start.Add(15*time.Second+1500*time.Microsecond))
}

func TestSetRateRebases(t *testing.T) {
	c, b, start := newClock(t, 2)
	b.Step(time.Second)
	expectNow(t, c, start.Add(2*time.Second))
	if err := c.SetRate(0.5); err != nil {
		t.Fatal(err)
	}
	// No jump at the change: the clock reads what it read just before.
	expectNow(t, c, start.Add(2*time.Second))
	b.Step(4 * time.Second)
	expectNow(t, c, start.Add(4*time.Second))
	if err := c.SetRate(1); err != nil {
		t.Fatal(err)
	}
	b.Step(time.Second)
	expectNow(t, c, start.Add(5*time.Second))
	if got := c.Rate(); got != 1 {
		t.Fatalf("Rate = %v, want 1", got)
	}
}

func TestSetRateRefused(t *testing.T) {
	c, b, start := newClock(t, 1)
	for _, r := range []float64{0, -1, 0.49, 2.01, 100} {
		if err := c.SetRate(r); !errors.Is(err, ErrRate) {
			t.Errorf("SetRate(%v) = %v, want ErrRate", r, err)
		}
	}
	b.Step(time.Second)
	expectNow(t, c, start.Add(time.Second))
	if _, err := New(b, 0); !errors.Is(err, ErrRate) {
		t.Errorf("New(rate 0) = %v, want ErrRate", err)
	}
}

func received(ch <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestTimerAtRate(t *testing.T) {
	c, b, start := newClock(t, 2)
	tm := c.NewTimer(10 * time.Second)
	b.Step(5*time.Second - time.Nanosecond)
	if _, ok := received(tm.C()); ok {
		t.Fatal("fired before the clock read its instant")
	}
	b.Step(time.Nanosecond)
	v, ok := received(tm.C())
	if !ok || !v.Equal(start.Add(10*time.Second)) {
		t.Fatalf("got %v, %v; want the clock's reading start+10s", v.Sub(start), ok)
	}
	if tm.Stop() {
		t.Fatal("Stop after firing reported a pending timer")
	}
}

// A slower rate after the timer was set must not let it fire early: it is
// set again for the rest of its wait at the new rate.
func TestTimerSlowedDown(t *testing.T) {
	c, b, start := newClock(t, 1)
	tm := c.NewTimer(10 * time.Second)
	b.Step(4 * time.Second)
	if err := c.SetRate(0.5); err != nil {
		t.Fatal(err)
	}
	b.Step(12*time.Second - time.Nanosecond)
	if _, ok := received(tm.C()); ok {
		t.Fatal("fired early after the rate slowed")
	}
	b.Step(time.Nanosecond)
	if v, ok := received(tm.C()); !ok || !v.Equal(start.Add(10*time.Second)) {
		t.Fatalf("got %v, %v; want start+10s", v.Sub(start), ok)
	}
}

// A faster rate makes it fire sooner in base time, not late.
func TestTimerSpedUp(t *testing.T) {
	c, b, start := newClock(t, 1)
	tm := c.NewTimer(10 * time.Second)
	b.Step(2 * time.Second)
	if err := c.SetRate(2); err != nil {
		t.Fatal(err)
	}
	b.Step(4*time.Second - time.Nanosecond)
	if _, ok := received(tm.C()); ok {
		t.Fatal("fired early after the rate rose")
	}
	b.Step(time.Nanosecond)
	if v, ok := received(tm.C()); !ok || !v.Equal(start.Add(10*time.Second)) {
		t.Fatalf("got %v, %v; want start+10s", v.Sub(start), ok)
	}
}

func TestTimerNeverEarly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		rate := MinRate + rng.Float64()*(MaxRate-MinRate)
		c, b, _ := newClock(t, rate)
		d := time.Duration(rng.Int64N(int64(time.Second)))
		at := c.Now().Add(d)
		var fired time.Time
		c.At(at, func() { fired = c.Now() })
		for fired.IsZero() {
			b.Step(time.Duration(rng.Int64N(int64(100 * time.Millisecond))))
			if rng.IntN(4) == 0 {
				if err := c.SetRate(MinRate + rng.Float64()*(MaxRate-MinRate)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if fired.Before(at) {
			t.Fatalf("rate %v, wait %v: fired %v early", rate, d, at.Sub(fired))
		}
	}
}

func TestTimerStop(t *testing.T) {
	c, b, _ := newClock(t, 1)
	tm := c.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer reported it had fired")
	}
	b.Step(2 * time.Second)
	if _, ok := received(tm.C()); ok {
		t.Fatal("a stopped timer delivered")
	}
	// Fired but not received: Stop drains it.
	tm = c.NewTimer(time.Second)
	b.Step(time.Second)
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported it pending")
	}
	if _, ok := received(tm.C()); ok {
		t.Fatal("received from C after Stop returned")
	}
	// A stopped At is not set again by a change of rate.
	calls := 0
	at := c.At(c.Now().Add(time.Second), func() { calls++ })
	at.Stop()
	if err := c.SetRate(2); err != nil {
		t.Fatal(err)
	}
	b.Step(time.Second)
	if calls != 0 {
		t.Fatalf("a stopped At ran %d times", calls)
	}
}

func TestAt(t *testing.T) {
	c, b, start := newClock(t, 0.5)
	var got []time.Time
	c.At(start.Add(time.Second), func() { got = append(got, c.Now()) })
	c.At(start.Add(-time.Second), func() { got = append(got, c.Now()) }) // past: at once
	b.Step(0)
	if len(got) != 1 || !got[0].Equal(start) {
		t.Fatalf("an At in the past: got %v", got)
	}
	b.Step(2*time.Second - time.Nanosecond)
	if len(got) != 1 {
		t.Fatal("At ran early")
	}
	b.Step(time.Nanosecond)
	if len(got) != 2 || !got[1].Equal(start.Add(time.Second)) {
		t.Fatalf("got %v, want a call at start+1s", got)
	}
}

func TestParseEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want Source
		err  bool
	}{
		{"1.002", Source{Rate: 1.002}, false},
		{" 0.995 ", Source{Rate: 0.995}, false},
		{"file:/tmp/x.rate", Source{File: "/tmp/x.rate"}, false},
		{"file:", Source{}, true},
		{"5", Source{}, true}, // a percentage, not a rate
		{"fast", Source{}, true},
	} {
		got, err := ParseEnv(tc.v)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseEnv(%q) = %+v, %v; want %+v, error %v", tc.v, got, err, tc.want, tc.err)
		}
	}
}

func TestRateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m1.rate")
	if _, err := ReadRate(path); err == nil {
		t.Fatal("ReadRate of a missing file succeeded")
	}
	if err := WriteRate(path, 1.005); err != nil {
		t.Fatal(err)
	}
	c, b, start := newClock(t, 1)
	if err := c.Reload(path); err != nil {
		t.Fatal(err)
	}
	b.Step(time.Second)
	expectNow(t, c, start.Add(1005*time.Millisecond))
	if err := os.WriteFile(path, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(path); err == nil {
		t.Fatal("Reload of a bad file succeeded")
	}
	if c.Rate() != 1.005 {
		t.Fatalf("a bad file changed the rate to %v", c.Rate())
	}
	if err := WriteRate(path, 3); !errors.Is(err, ErrRate) {
		t.Fatalf("WriteRate(3) = %v, want ErrRate", err)
	}
}

func TestFromEnv(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if c, err := FromEnv(ctx, "", nil); c != nil || err != nil {
		t.Fatalf("FromEnv(\"\") = %v, %v; want no clock", c, err)
	}
	c, err := FromEnv(ctx, "0.99", nil)
	if err != nil || c.Rate() != 0.99 {
		t.Fatalf("FromEnv(0.99) = %v, %v", c, err)
	}
	path := filepath.Join(t.TempDir(), "h.rate")
	if _, err := FromEnv(ctx, "file:"+path, nil); err == nil {
		t.Fatal("FromEnv of a missing file succeeded")
	}
	if err := WriteRate(path, 1.01); err != nil {
		t.Fatal(err)
	}
	c, err = FromEnv(ctx, "file:"+path, nil)
	if err != nil || c.Rate() != 1.01 {
		t.Fatalf("FromEnv(file) = %v, %v", c, err)
	}
	if err := WriteRate(path, 0.98); err != nil {
		t.Fatal(err)
	}
	// The poll is on real time; wait for it, without timing it.
	deadline := time.Now().Add(10 * time.Second)
	for c.Rate() != 0.98 {
		if time.Now().After(deadline) {
			t.Fatal("the clock did not follow its file")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

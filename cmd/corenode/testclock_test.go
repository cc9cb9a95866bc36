package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/corenode/corenode/internal/rateclock"
)

func TestTestClock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	t.Setenv(rateclock.Env, "")
	if c, err := testClock(ctx, log); c != nil || err != nil {
		t.Fatalf("unset: %v, %v; want the real clock (nil)", c, err)
	}
	t.Setenv(rateclock.Env, "1.25")
	c, err := testClock(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.(leaseClock).Rate(); r != 1.25 {
		t.Fatalf("rate %v, want 1.25", r)
	}
	path := filepath.Join(t.TempDir(), "m1.rate")
	for _, bad := range []string{"5", "fast", "file:" + path} {
		t.Setenv(rateclock.Env, bad)
		if c, err := testClock(ctx, log); err == nil {
			t.Errorf("%s=%q: clock %v, want an error", rateclock.Env, bad, c)
		}
	}
	if err := rateclock.WriteRate(path, 0.99); err != nil {
		t.Fatal(err)
	}
	t.Setenv(rateclock.Env, "file:"+path)
	if c, err = testClock(ctx, log); err != nil || c.(leaseClock).Rate() != 0.99 {
		t.Fatalf("file: %v, %v; want rate 0.99", c, err)
	}
}

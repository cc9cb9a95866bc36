package main

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/corenode/corenode/member/membertest"
)

// TestFollowerReadWorkload runs follower-read against three members in
// this process: every read through the follower returns the write the
// leader acknowledged before it, for both consistencies.
func TestFollowerReadWorkload(t *testing.T) {
	c := membertest.New(t, 3)
	c.WaitLeader()
	progressOut = nil
	for _, consistency := range []string{"l", "s"} {
		fs := flag.NewFlagSet("follower-read", flag.ContinueOnError)
		body := setupFollowerRead(fs)
		if err := fs.Parse([]string{"--consistency", consistency, "--total", "20", "--put-interval", "1ms"}); err != nil {
			t.Fatal(err)
		}
		cm := &common{endpoints: []string{c.Endpoint(0), c.Endpoint(1), c.Endpoint(2)}, conns: 1, clients: 1, dialTimeout: 5 * time.Second}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		r, err := body(ctx, cm)
		cancel()
		if err != nil {
			t.Fatalf("follower-read --consistency %s: %v", consistency, err)
		}
		if r.Errors != 0 {
			t.Errorf("--consistency %s: %d reads failed: %s", consistency, r.Errors, r.Text)
		}
	}
}

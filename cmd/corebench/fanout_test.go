package main

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/member/membertest"
)

// TestFanoutWorkload runs fanout-rtt against a member in this process:
// every round gets its answer on every connection, and the summary counts
// them all.
func TestFanoutWorkload(t *testing.T) {
	c := membertest.New(t, 1)
	c.WaitLeader()
	progressOut = nil
	fs := flag.NewFlagSet("fanout-rtt", flag.ContinueOnError)
	body := setupFanout(fs)
	if err := fs.Parse([]string{"--total", "20", "--interval", "1ms"}); err != nil {
		t.Fatal(err)
	}
	cm := &common{endpoints: []string{c.Endpoint(0)}, conns: 3, clients: 1, dialTimeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := body(ctx, cm)
	if err != nil {
		t.Fatalf("fanout-rtt: %v", err)
	}
	if r.Workload != "fanout-rtt-3" || r.Errors != 0 || !strings.Contains(r.Text, "Total:") {
		t.Fatalf("fanout-rtt: workload %q, %d errors: %s", r.Workload, r.Errors, r.Text)
	}
	for _, m := range r.Metrics {
		if m.Name == "p50_ms" && m.Value > 0 {
			return
		}
	}
	t.Fatalf("no p50 in %+v", r.Metrics)
}

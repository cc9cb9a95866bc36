package main

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/member/membertest"
)

// TestKeysWorkload runs the scale workload against a one-member cluster in
// this process: every key is written and counted, the result carries the
// figures bench-vs-etcd puts in its table, and --verify notices a key that
// is gone.
func TestKeysWorkload(t *testing.T) {
	c := membertest.New(t, 1)
	c.WaitLeader()
	ep := c.Endpoint(0)
	run := func(args ...string) (*Result, error) {
		t.Helper()
		fs := flag.NewFlagSet("keys", flag.ContinueOnError)
		body := setupKeys(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		cm := &common{endpoints: []string{ep}, conns: 2, clients: 4, dialTimeout: 5 * time.Second,
			pids: map[string]int{endpointKey(ep): os.Getpid()}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return body(ctx, cm)
	}
	progressOut = nil

	r, err := run("--keys", "300", "--key-size", "8", "--val-size", "100", "--settle", "0s")
	if err != nil {
		t.Fatalf("keys: %v", err)
	}
	got := map[string]float64{}
	for _, m := range r.Metrics {
		got[m.Name] = m.Value
	}
	for _, name := range []string{"rps", "p99_ms", "leader_bytes_per_key", "member_avg_bytes_per_key", "range_all_s"} {
		if _, ok := got[name]; !ok {
			t.Errorf("result has no %s: %v", name, got)
		}
	}
	if got["rps"] <= 0 {
		t.Errorf("rps = %v, want > 0", got["rps"])
	}
	if _, err := run("--keys", "300", "--val-size", "100", "--verify"); err != nil {
		t.Fatalf("verify after the load: %v", err)
	}

	k := keyOpts{keySize: 8, keySpace: 300, sequential: true}
	if _, err := c.Client(0).Delete(context.Background(), k.key(17)); err != nil {
		t.Fatal(err)
	}
	_, err = run("--keys", "300", "--val-size", "100", "--verify")
	if err == nil || !strings.Contains(err.Error(), "holds 299 of the 300 keys") {
		t.Fatalf("verify with a key deleted: %v, want it to count 299 of 300", err)
	}
}

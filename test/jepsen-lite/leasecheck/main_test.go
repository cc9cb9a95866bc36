package main

import (
	"testing"
	"time"

	"github.com/corenode/corenode/test/jepsen-lite/internal/checker"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

const ms = int64(time.Millisecond)

// lease is a 2 s lease granted at 0 with its key put at 20 ms, then the
// reads given (at, found), with a commit every 100 ms throughout.
func lease(reads ...[2]int64) []history.Op {
	const id, key = 9, "lease-expiry/00001"
	ops := []history.Op{
		{ID: 1, Kind: history.KindGrant, Key: key, Lease: id, TTL: 2, Start: 0, End: 10 * ms, Result: history.OK},
		{ID: 2, Kind: history.KindLeasePut, Key: key, Lease: id, Start: 20 * ms, End: 30 * ms, Result: history.OK, Rev: 2},
	}
	for t := int64(0); t < 6000; t += 100 {
		ops = append(ops, history.Op{Kind: history.KindCanary, Start: t * ms, End: t * ms, Result: history.OK})
	}
	for _, r := range reads {
		ops = append(ops, history.Op{Kind: history.KindLeaseGet, Key: key, Lease: id, Start: r[0] * ms, End: (r[0] + 5) * ms,
			Result: history.OK, Found: r[1] == 1})
	}
	return ops
}

func TestCheck(t *testing.T) {
	cfg := checker.LeaseConfig{Prefix: "lease-expiry/", Tick: 100 * time.Millisecond, CheckpointAfter: time.Second,
		CommitSlack: 250 * time.Millisecond, BacklogSlack: time.Second, GapThreshold: 300 * time.Millisecond}
	for _, tc := range []struct {
		name              string
		ops               []history.Op
		advisory          bool
		violations, known int
	}{
		{"on time", lease([2]int64{1900, 1}, [2]int64{2100, 0}), false, 0, 0},
		{"early", lease([2]int64{1900, 0}), false, 1, 0},
		{"early is never advisory", lease([2]int64{1900, 0}), true, 1, 0},
		// The bound: 10 ms (the grant's answer, the last time the cluster could renew it) + 2 s
		// + 1 s + 100 ms + 250 ms = 3.36 s.
		{"past the bound", lease([2]int64{3500, 1}, [2]int64{3700, 0}), false, 1, 0},
		{"past the bound, advisory", lease([2]int64{3500, 1}, [2]int64{3700, 0}), true, 0, 1},
		{"back", lease([2]int64{2100, 0}, [2]int64{2200, 1}), true, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, failed := check(tc.ops, cfg, tc.advisory)
			if len(rep.Violations) != tc.violations || len(rep.Known) != tc.known || failed != (tc.violations > 0) {
				t.Fatalf("violations %q, known %q, failed %v; want %d, %d", rep.Violations, rep.Known, failed, tc.violations, tc.known)
			}
			if rep.Leases != 1 || rep.Gone != 1 {
				t.Errorf("leases %d, gone %d; want 1, 1", rep.Leases, rep.Gone)
			}
		})
	}
}

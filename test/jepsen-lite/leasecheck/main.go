// Command leasecheck checks a history of lease operations recorded by
// someone else with jepsen-lite's lease checker (internal/checker.Leases,
// the rules of docs/leases.md: never early, within the bound, final).
// scripts/etcd-robustness runs it after each run of etcd's robustness suite
// on the history of the lease-expiry workload that ran beside etcd's
// traffic (test/etcd-robustness/testdata/leases_test.go).
//
//	leasecheck -history FILE [-bound-advisory] [-details FILE]
//
// The history is JSON lines in jepsen-lite's format (history.Op): grants,
// puts of a key attached to a lease, reads of those keys, watch events of
// them, TimeToLive answers, the members' terms (status), and canary
// writes that show when the cluster could commit. It prints one JSON line
// (Report) and exits 0 when no rule counted as failing is broken, 1 when
// one is, 2 when the history cannot be read.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/corenode/corenode/test/jepsen-lite/internal/checker"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// Report is the one line leasecheck prints.
type Report struct {
	// Leases granted and checked; Gone of them seen gone; NewTerm of those
	// seen gone after a new term began in their life.
	Leases  int `json:"leases"`
	Gone    int `json:"gone"`
	NewTerm int `json:"new_term"`
	// Violations fail the run; Known are broken bounds with
	// -bound-advisory (etcd's leader changes extend leases), reported only.
	Violations []string `json:"violations"`
	Known      []string `json:"known"`
	Stats      []string `json:"stats"`
}

func main() {
	path := flag.String("history", "", "the history, JSON lines of jepsen-lite's history.Op")
	prefix := flag.String("prefix", "", "the lease keys' prefix")
	tick := flag.Duration("tick", 100*time.Millisecond, "the members' --lease-tick")
	after := flag.Duration("checkpoint-after", time.Second, "the members' --lease-checkpoint-after")
	slack := flag.Duration("commit-slack", 250*time.Millisecond, "time to commit and apply an expiry once the leader decided it")
	gap := flag.Duration("gap-threshold", 300*time.Millisecond, "a time between two commits longer than this counts in full as time without a leader")
	advisory := flag.Bool("bound-advisory", false, "report leases that outlived the bound without failing (etcd: a leader change restarts a lease's TTL)")
	details := flag.String("details", "", "write the checker's line per lease here")
	flag.Parse()
	if *path == "" {
		fmt.Fprintln(os.Stderr, "leasecheck: -history is required")
		os.Exit(2)
	}
	ops, err := history.Load(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasecheck:", err)
		os.Exit(2)
	}
	rep, failed := check(ops, checker.LeaseConfig{
		Prefix: *prefix, Tick: *tick, CheckpointAfter: *after, CommitSlack: *slack,
		BacklogSlack: time.Second, GapThreshold: *gap,
	}, *advisory)
	if *details != "" {
		_ = os.WriteFile(*details, []byte(strings.Join(rep.details, "\n")+"\n"), 0o644)
	}
	line, _ := json.Marshal(rep.Report)
	fmt.Println(string(line))
	if failed {
		os.Exit(1)
	}
}

type result struct {
	Report
	details []string
}

// check runs the lease checker and sorts its anomalies: a broken bound is
// known with advisory, every other anomaly is a violation. failed is true
// when there is a violation.
func check(ops []history.Op, cfg checker.LeaseConfig, advisory bool) (result, bool) {
	avail := checker.AvailabilityOf(ops, cfg.GapThreshold)
	r := checker.Leases(ops, cfg, avail, checker.FaultsOf(ops))
	gap, at := avail.LongestGap()
	rep := result{Report: Report{
		Leases: r.Counts[checker.CountLeases], Gone: r.Counts[checker.CountGone], NewTerm: r.Counts[checker.CountTerms],
		Violations: []string{}, Known: []string{},
		Stats: append(r.Stats, fmt.Sprintf("longest time without a commit: %s from %s", history.Dur(gap), history.Dur(at))),
	}, details: r.Details}
	for _, a := range r.Anomalies {
		if advisory && a.Rule == checker.RuleBound {
			rep.Known = append(rep.Known, a.What)
		} else {
			rep.Violations = append(rep.Violations, a.String())
		}
	}
	return rep, len(rep.Violations) > 0
}

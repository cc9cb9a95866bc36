package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/corenode/corenode/internal/drift"
	"github.com/corenode/corenode/test/jepsen-lite/internal/checker"
	"github.com/corenode/corenode/test/jepsen-lite/internal/cluster"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
	"github.com/corenode/corenode/test/jepsen-lite/internal/holder"
	"github.com/corenode/corenode/test/jepsen-lite/internal/nemesis"
	"github.com/corenode/corenode/test/jepsen-lite/internal/workload"
)

// countOps is the number of client operations in a history: everything but
// faults, the monitor's status records, watch events (which are
// deliveries, not operations) and the election holders' own doings (an
// action is local to its holder; its fenced writes are operations) and
// the cached-read readers' exits.
func countOps(ops []history.Op) int {
	n := 0
	for _, op := range ops {
		switch op.Kind {
		case history.KindFault, history.KindStatus, history.KindWatch, history.KindHistory, history.KindWatchOp, history.KindWatchEnd,
			history.KindAct, history.KindElected, history.KindElectLost, history.KindHolderExit, history.KindReaderExit:
		default:
			n++
		}
	}
	return n
}

// faultCounts counts injected faults by kind (a move-leader sequence is
// one fault; its steps are recorded separately).
func faultCounts(ops []history.Op) (map[string]int, int) {
	counts := map[string]int{}
	total := 0
	for _, op := range ops {
		if op.Kind != history.KindFault || strings.HasPrefix(op.Detail, "move-leader step") {
			continue
		}
		kind, _, _ := strings.Cut(op.Detail, ":")
		counts[kind]++
		total++
	}
	return counts, total
}

func check(ops []history.Op, cfg *config) []checker.Result {
	faults := checker.FaultsOf(ops)
	avail := checker.AvailabilityOf(ops, 300*time.Millisecond)
	settings := cluster.DefaultSettings
	searchStart := time.Now()
	lin := checker.Linearizable(ops, workload.RegPrefix, cfg.CheckBudget, cfg.Out)
	searched := time.Since(searchStart)
	set := checker.Set(ops, workload.SetPrefix)
	watch := checker.Watch(ops, checker.WatchConfig{Prefix: workload.Prefix, LeasePrefix: workload.LeasePrefix, MarkerKey: workload.MarkerKey})
	lease := checker.Leases(ops, checker.LeaseConfig{
		Prefix:          workload.LeasePrefix,
		Tick:            time.Duration(settings.LeaseTickMS) * time.Millisecond,
		CheckpointAfter: time.Duration(settings.LeaseCheckpoint) * time.Millisecond,
		CommitSlack:     250 * time.Millisecond,
		BacklogSlack:    time.Second,
		GapThreshold:    300 * time.Millisecond,
		ClockFault:      string(nemesis.ClockRate) + ":",
		DriftMargin:     drift.Margin,
	}, avail, faults)
	gap, at := avail.LongestGap()
	lease.Stats = append(lease.Stats, fmt.Sprintf("longest time without a commit: %s from %s", history.Dur(gap), history.Dur(at)))
	results := []checker.Result{lin, set, watch, lease}
	if modes, _ := holderModes(cfg.HolderModes); cfg.Holders > 0 && len(modes) > 0 {
		var em []checker.ElectionMode
		for _, m := range modes {
			// The library's promise is the one under test; the naive
			// holders are the comparison.
			em = append(em, checker.ElectionMode{Name: m, Prefix: workload.ElectionKey(m), Strict: m != holder.Naive})
		}
		el, _ := checker.Election(ops, em)
		results = append(results, el)
	}
	if cfg.CacheReaders > 0 {
		cr, _ := checker.CachedReads(ops, checker.CacheConfig{
			Prefix: workload.CachePrefix, ReadLease: cfg.readLease(), PauseSlack: 250 * time.Millisecond,
			// -check-budget is for the linearizability searches in all.
			Budget: max(cfg.CheckBudget-searched, time.Millisecond), OutDir: cfg.Out,
		})
		results = append(results, cr)
	}
	return results
}

// finish stops the cluster, checks the history and prints the summary; it
// returns the exit status.
func (r *runner) finish(rec *history.Recorder, cl cluster.Cluster, clusterFindings ...string) int {
	var problems []string
	if cl != nil {
		if err := cl.Close(); err != nil {
			r.harnessErr("stop the cluster: %v", err)
		}
		problems = cl.Problems()
	}
	r.mu.Lock()
	dirs := r.tempDirs
	r.mu.Unlock()
	for _, d := range dirs {
		os.RemoveAll(d)
	}
	var ops []history.Op
	if rec != nil {
		if err := rec.Close(); err != nil {
			r.harnessErr("%v", err)
		}
		ops = rec.Ops()
	}
	results := check(ops, r.cfg)
	cr := checker.Result{Name: "cluster"}
	for _, p := range append(clusterFindings, problems...) {
		if p != "" {
			cr.Anomalies = append(cr.Anomalies, checker.Anomaly{Checker: "cluster", What: p})
		}
	}
	results = append(results, cr)

	r.mu.Lock()
	harness := append([]string(nil), r.harness...)
	r.mu.Unlock()
	if r.interrupted.Load() {
		harness = append(harness, "interrupted by a signal")
	}
	status := exitValid
	abortOnce.Do(func() {
		status = r.report(ops, results, harness)
	})
	return status
}

// report writes summary.txt and prints it; the last line is the verdict.
func (r *runner) report(ops []history.Op, results []checker.Result, harness []string) int {
	cfg := r.cfg
	var b strings.Builder
	counts, total := faultCounts(ops)
	fmt.Fprintf(&b, "jepsen-lite: members=%d seed=%d duration=%v docker=%v faults=%s\n", cfg.Members, cfg.Seed, cfg.Duration, cfg.Docker, cfg.Faults)
	fmt.Fprintf(&b, "output: %s (history.jsonl, member logs, summary.txt)\n", cfg.Out)
	if !r.started.IsZero() {
		fmt.Fprintf(&b, "wall time: %v\n", time.Since(r.started).Round(time.Second))
	}
	var kinds []string
	for k, n := range counts {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "faults injected: %d (%s)\n", total, strings.Join(kinds, " "))
	for _, op := range ops {
		if op.Kind == history.KindFault && !strings.HasPrefix(op.Detail, "move-leader step") {
			e := ""
			if op.Error != "" {
				e = " error: " + op.Error
			}
			fmt.Fprintf(&b, "  %8s .. %8s  %s%s\n", history.Dur(op.Start), history.Dur(op.End), op.Detail, e)
		}
	}
	r.mu.Lock()
	skipped := r.skipped
	r.mu.Unlock()
	if len(skipped) > 0 {
		fmt.Fprintf(&b, "faults this cluster cannot inject, skipped: %v\n", skipped)
	}
	if cfg.RequireAll {
		want, _ := nemesis.Parse(cfg.Faults)
		for _, k := range want {
			if slices.Contains(skipped, k) {
				continue
			}
			if counts[string(k)] == 0 {
				harness = append(harness, fmt.Sprintf("fault %s was never injected (-require-all-faults)", k))
			}
		}
	}
	anomalies := 0
	unknown := false
	for _, res := range results {
		verdict := "valid"
		switch {
		case len(res.Anomalies) > 0:
			verdict = fmt.Sprintf("INVALID (%d anomalies)", len(res.Anomalies))
		case res.Unknown:
			verdict = "UNKNOWN"
		}
		fmt.Fprintf(&b, "%-13s %s\n", res.Name+":", verdict)
		for _, s := range res.Stats {
			fmt.Fprintf(&b, "    %s\n", s)
		}
		anomalies += len(res.Anomalies)
		unknown = unknown || res.Unknown
	}
	if anomalies > 0 {
		fmt.Fprintf(&b, "anomalies:\n")
		for _, res := range results {
			for _, a := range res.Anomalies {
				fmt.Fprintf(&b, "  %s\n", strings.ReplaceAll(a.String(), "\n", "\n  "))
			}
		}
	}
	for _, h := range harness {
		fmt.Fprintf(&b, "run error: %s\n", h)
	}
	for _, res := range results {
		if res.Headline != "" {
			fmt.Fprintln(&b, res.Headline)
		}
	}
	valid := anomalies == 0 && !unknown && len(harness) == 0
	fmt.Fprintf(&b, "valid=%v ops=%d faults=%d anomalies=%d\n", valid, countOps(ops), total, anomalies)

	for _, res := range results {
		if len(res.Details) > 0 {
			path := filepath.Join(cfg.Out, res.Name+".txt")
			if err := os.WriteFile(path, []byte(strings.Join(res.Details, "\n")+"\n"), 0o644); err != nil {
				r.log.Error("write details", "path", path, "err", err)
			}
		}
	}
	var w io.Writer = os.Stdout
	name := "summary.txt"
	if cfg.Check != "" {
		name = "summary-recheck.txt" // keep the run's own verdict
	}
	if f, err := os.Create(filepath.Join(cfg.Out, name)); err == nil {
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	fmt.Fprint(w, b.String())
	switch {
	case anomalies > 0:
		return exitAnomalies
	case len(harness) > 0:
		return exitHarness
	case unknown:
		return exitUnknown
	}
	return exitValid
}

// recheck runs the checkers over a saved run.
func recheck(cfg *config, log *slog.Logger) int {
	dir := cfg.Check
	b, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-lite:", err)
		return exitHarness
	}
	saved := *cfg
	// A run from before the cached-read workload has no cache_readers:
	// none ran.
	saved.CacheReaders = 0
	if err := json.Unmarshal(b, &saved); err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-lite: run.json:", err)
		return exitHarness
	}
	// Output of the re-check goes to the run's directory.
	saved.Out, saved.CheckBudget = dir, cfg.CheckBudget
	ops, err := history.Load(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-lite:", err)
		return exitHarness
	}
	log.Info("re-checking", "dir", dir, "records", len(ops))
	r := &runner{cfg: &saved, log: log}
	var status int
	abortOnce.Do(func() { status = r.report(ops, check(ops, &saved), nil) })
	return status
}

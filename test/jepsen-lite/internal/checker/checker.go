// Package checker judges a recorded history: linearizability of the
// register workload, no lost acknowledged write, watch completeness and
// order, and the lease promises.
package checker

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// Anomaly is one thing the history shows the cluster did wrong.
type Anomaly struct {
	Checker string
	// Rule is which of the checker's promises it breaks, where the checker
	// names them (the lease checker: RuleEarly, RuleBound, RuleFinal), so a
	// caller can weigh them apart (scripts/etcd-robustness on etcd, whose
	// leader changes extend leases, reports RuleBound without failing).
	Rule string
	What string
	Ops  []history.Op
}

func (a Anomaly) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] %s", a.Checker, a.What)
	for _, op := range a.Ops {
		fmt.Fprintf(&b, "\n    %s", Describe(op))
	}
	return b.String()
}

// Result of one checker.
type Result struct {
	Name string
	// Unknown: the checker could not decide (e.g. the linearizability
	// search ran out of time); the run is then not valid either.
	Unknown   bool
	Anomalies []Anomaly
	Stats     []string
	// Details are written to <Name>.txt next to the history.
	Details []string
	// Headline, if set, is printed just above the verdict line: numbers
	// worth seeing even when the checker passed.
	Headline string
	// Counts are the checker's numbers by name, for a caller that reports
	// them (the lease checker: see Leases).
	Counts map[string]int
}

// Valid is true when nothing is wrong and the checker decided.
func (r *Result) Valid() bool { return !r.Unknown && len(r.Anomalies) == 0 }

func (r *Result) add(what string, ops ...history.Op) {
	r.addRule("", what, ops...)
}

func (r *Result) addRule(rule, what string, ops ...history.Op) {
	r.Anomalies = append(r.Anomalies, Anomaly{Checker: r.Name, Rule: rule, What: what, Ops: ops})
}

func (r *Result) stat(format string, args ...any) {
	r.Stats = append(r.Stats, fmt.Sprintf(format, args...))
}

// Describe is one op as a line for a report.
func Describe(op history.Op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d p%d %s", op.ID, op.Process, op.Kind)
	if op.Member >= 0 {
		fmt.Fprintf(&b, "@m%d", op.Member+1)
	}
	if op.Key != "" {
		fmt.Fprintf(&b, " %s", op.Key)
	}
	if op.Value != "" {
		fmt.Fprintf(&b, " value=%s", op.Value)
	}
	if op.Expect != "" {
		fmt.Fprintf(&b, " expect=%s", op.Expect)
	}
	if op.Kind == history.KindCASRev {
		fmt.Fprintf(&b, " expect_rev=%d", op.ExpectRev)
	}
	if op.Event != "" {
		fmt.Fprintf(&b, " event=%s", op.Event)
	}
	if op.Lease != 0 {
		fmt.Fprintf(&b, " lease=%x", op.Lease)
	}
	if op.Token != 0 {
		fmt.Fprintf(&b, " token=%d", op.Token)
	}
	fmt.Fprintf(&b, " [%s..%s] %s", history.Dur(op.Start), history.Dur(op.End), op.Result)
	if op.Rev != 0 {
		fmt.Fprintf(&b, " rev=%d", op.Rev)
	}
	if op.Swapped {
		b.WriteString(" swapped")
	}
	if op.Kind == history.KindCASValue || op.Kind == history.KindCASRev {
		if !op.Swapped && op.Result == history.OK {
			fmt.Fprintf(&b, " else-read found=%v value=%s rev=%d", op.Found, op.Read, op.ReadRev)
		}
	}
	if op.Kind == history.KindLeaseGet {
		fmt.Fprintf(&b, " found=%v", op.Found)
	}
	if op.TTL != 0 || op.Kind == history.KindKeep || op.Kind == history.KindTTL || op.Kind == history.KindGrant {
		fmt.Fprintf(&b, " ttl=%d", op.TTL)
	}
	if op.Leader != 0 {
		fmt.Fprintf(&b, " leader=%x term=%d", op.Leader, op.Term)
	}
	if op.Detail != "" {
		fmt.Fprintf(&b, " (%s)", op.Detail)
	}
	if op.Error != "" {
		fmt.Fprintf(&b, " err=%q", op.Error)
	}
	return b.String()
}

// Faults are the fault intervals of a history.
type Faults []history.Op

// FaultsOf picks the fault records.
func FaultsOf(ops []history.Op) Faults {
	var fs Faults
	for _, op := range ops {
		if op.Kind == history.KindFault {
			fs = append(fs, op)
		}
	}
	return fs
}

// During lists the faults in effect at some time in [a, b].
func (fs Faults) During(a, b int64) []string {
	var out []string
	for _, f := range fs {
		if f.Start <= b && f.End >= a {
			out = append(out, fmt.Sprintf("%s [%s..%s]", f.Detail, history.Dur(f.Start), history.Dur(f.End)))
		}
	}
	return out
}

// Has reports whether a fault whose detail starts with prefix was in
// effect at some time in [a, b].
func (fs Faults) Has(prefix string, a, b int64) bool {
	for _, f := range fs {
		if f.Start <= b && f.End >= a && strings.HasPrefix(f.Detail, prefix) {
			return true
		}
	}
	return false
}

// LatestEnd is the latest end of a fault in effect at some time in [a, b]
// (0 when none).
func (fs Faults) LatestEnd(a, b int64) int64 {
	var end int64
	for _, f := range fs {
		if f.Start <= b && f.End >= a && f.End > end {
			end = f.End
		}
	}
	return end
}

// Availability is when the cluster demonstrably committed: the end times
// of every acknowledged write, whatever the workload. A gap between two
// longer than Threshold counts in full as time without a leader that could
// commit, which over-approximates the time without a leader.
type Availability struct {
	commits   []int64
	end       int64 // the end of the history: nothing is known after it
	Threshold int64
}

// AvailabilityOf collects the commit evidence of a history.
func AvailabilityOf(ops []history.Op, threshold time.Duration) *Availability {
	a := &Availability{Threshold: int64(threshold)}
	for _, op := range ops {
		a.end = max(a.end, op.End)
		if op.Result != history.OK {
			continue
		}
		switch op.Kind {
		case history.KindPut, history.KindCASValue, history.KindCASRev, history.KindAdd, history.KindLeasePut,
			history.KindGrant, history.KindRevoke, history.KindCanary, history.KindFinal:
			a.commits = append(a.commits, op.End)
		}
	}
	sort.Slice(a.commits, func(i, j int) bool { return a.commits[i] < a.commits[j] })
	return a
}

// Unavailable is how much of [from, to] lies in gaps between commits
// longer than the threshold (and after the last commit, up to the end of
// the history).
func (a *Availability) Unavailable(from, to int64) int64 {
	to = min(to, a.end)
	if to <= from {
		return 0
	}
	var sum int64
	prev := int64(0)
	for i := 0; i <= len(a.commits); i++ {
		c := a.end
		if i < len(a.commits) {
			c = a.commits[i]
		}
		if c-prev > a.Threshold {
			lo, hi := max(prev, from), min(c, to)
			if hi > lo {
				sum += hi - lo
			}
		}
		prev = c
		if prev >= to {
			break
		}
	}
	return sum
}

// LongestGap is the longest time between commits, for the report.
func (a *Availability) LongestGap() (int64, int64) {
	var gap, at int64
	for i := 1; i < len(a.commits); i++ {
		if g := a.commits[i] - a.commits[i-1]; g > gap {
			gap, at = g, a.commits[i-1]
		}
	}
	return gap, at
}

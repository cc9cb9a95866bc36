package checker

import (
	"fmt"
	"sort"
	"strings"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// ElectionMode is one election of the election workload: the holders of
// one way of electing, campaigning on one prefix.
type ElectionMode struct {
	Name   string
	Prefix string // the Key of its history records
	// Strict: a stale action or an out-of-order fenced write is an
	// anomaly. Otherwise it is only counted (the naive holders, whose
	// stale actions are the point of comparison).
	Strict bool
}

// ElectionCounts is what the checker found in one mode.
type ElectionCounts struct {
	Leaderships int
	Actions     int
	// Stale: actions of a token t after the first action of some token
	// t' > t, i.e. after a successor had begun to act; MaxStaleness is
	// the longest such overlap (ns).
	Stale        int
	MaxStaleness int64
	// OutOfOrder: fenced writes that committed at a revision above that
	// of a committed write with a higher token.
	OutOfOrder                     int
	Committed, Rejected, Uncertain int
	// Closest is the shortest time from a token's last action to its
	// successor's first (ns; negative when stale; 0 with no handover): how
	// near a run came to a stale action, e.g. under clock-rate, where the
	// drift margin is what keeps them apart.
	Closest   int64
	Handovers int
}

// Summary is the counts on one line.
func (c ElectionCounts) Summary() string {
	return fmt.Sprintf("stale=%d max-staleness=%s out-of-order=%d", c.Stale, history.Dur(c.MaxStaleness), c.OutOfOrder)
}

// Election judges the election workload, mode by mode: a holder must not
// act once a holder with a later token has begun to (timed on the one
// clock of the machine, CLOCK_MONOTONIC, by the holders themselves), and
// corenode must commit the fenced writes in token order: a write guarded
// on the create revision of an election key cannot commit once a later
// key leads, since that key leads only after the earlier one is deleted.
// The counts of every mode are in Stats; Headline puts them side by side.
func Election(ops []history.Op, modes []ElectionMode) (Result, map[string]ElectionCounts) {
	r := Result{Name: "election"}
	counts := map[string]ElectionCounts{}
	var line []string
	for _, m := range modes {
		c := electionMode(&r, ops, m)
		counts[m.Name] = c
		line = append(line, m.Name+" "+c.Summary())
		r.stat("%s: %d stale actions (longest %s after the successor began), %d fenced writes out of token order",
			m.Name, c.Stale, history.Dur(c.MaxStaleness), c.OutOfOrder)
		r.stat("%s: %d leaderships, %d actions; fenced writes: %d committed, %d refused, %d indeterminate",
			m.Name, c.Leaderships, c.Actions, c.Committed, c.Rejected, c.Uncertain)
		if c.Handovers > 0 {
			r.stat("%s: closest of %d handovers: the successor's first action %s after the predecessor's last",
				m.Name, c.Handovers, history.Dur(c.Closest))
		}
	}
	r.Headline = "election: " + strings.Join(line, "; ")
	return r, counts
}

func electionMode(r *Result, ops []history.Op, m ElectionMode) ElectionCounts {
	var c ElectionCounts
	var acts, writes []history.Op
	first := map[int64]history.Op{} // each token's first action
	last := map[int64]int64{}       // and the time of its last
	for _, op := range ops {
		if op.Key != m.Prefix {
			continue
		}
		switch op.Kind {
		case history.KindElected:
			c.Leaderships++
		case history.KindAct:
			acts = append(acts, op)
			if f, ok := first[op.Token]; !ok || op.Start < f.Start {
				first[op.Token] = op
			}
			if l, ok := last[op.Token]; !ok || op.Start > l {
				last[op.Token] = op.Start
			}
		case history.KindFencedPut:
			switch {
			case op.Result != history.OK:
				c.Uncertain++
			case op.Swapped:
				c.Committed++
				writes = append(writes, op)
			default:
				c.Rejected++
			}
		}
	}
	c.Actions = len(acts)

	// successor[t] is the earliest first action of any token above t.
	tokens := make([]int64, 0, len(first))
	for t := range first {
		tokens = append(tokens, t)
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] > tokens[j] })
	successor := map[int64]history.Op{}
	var earliest *history.Op
	for _, t := range tokens {
		if earliest != nil {
			successor[t] = *earliest
		}
		if f := first[t]; earliest == nil || f.Start < earliest.Start {
			earliest = &f
		}
	}
	for t, s := range successor {
		gap := s.Start - last[t]
		if c.Handovers == 0 || gap < c.Closest {
			c.Closest = gap
		}
		c.Handovers++
	}
	type episode struct {
		n         int
		worst     history.Op
		staleness int64
	}
	episodes := map[int64]*episode{}
	for _, a := range acts {
		s, ok := successor[a.Token]
		if !ok || a.Start <= s.Start {
			continue
		}
		c.Stale++
		d := a.Start - s.Start
		c.MaxStaleness = max(c.MaxStaleness, d)
		e := episodes[a.Token]
		if e == nil {
			e = &episode{}
			episodes[a.Token] = e
		}
		e.n++
		if d > e.staleness {
			e.staleness, e.worst = d, a
		}
	}
	if m.Strict {
		stale := make([]int64, 0, len(episodes))
		for t := range episodes {
			stale = append(stale, t)
		}
		sort.Slice(stale, func(i, j int) bool { return stale[i] < stale[j] })
		for _, t := range stale {
			e := episodes[t]
			r.add(fmt.Sprintf("%s: token %d acted %d times after a later token began, the last %s after",
				m.Name, t, e.n, history.Dur(e.staleness)), successor[t], e.worst)
		}
	}

	sort.Slice(writes, func(i, j int) bool { return writes[i].Rev < writes[j].Rev })
	var highest *history.Op
	for _, w := range writes {
		if highest != nil && w.Token < highest.Token {
			c.OutOfOrder++
			if m.Strict {
				r.add(fmt.Sprintf("%s: fenced write of token %d committed at revision %d, after one of token %d at %d",
					m.Name, w.Token, w.Rev, highest.Token, highest.Rev), *highest, w)
			}
			continue
		}
		highest = &w
	}
	return c
}

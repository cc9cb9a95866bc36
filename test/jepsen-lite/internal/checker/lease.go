package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// LeaseConfig holds the bounds the lease checker holds the cluster to.
type LeaseConfig struct {
	Prefix string // lease keys live under it
	// The members' --lease-tick and --lease-checkpoint-after: a lease that
	// was not yet checkpointed may outlive a leader change by
	// CheckpointAfter, a checkpointed one by Tick (docs/leases.md); the
	// checker allows the larger, CheckpointAfter + Tick, to every lease.
	Tick, CheckpointAfter time.Duration
	// CommitSlack is the time to commit and apply the expiry entry once
	// the leader decided it (docs/leases.md: lag under 100 ms at p99).
	CommitSlack time.Duration
	// BacklogSlack: a keep-alive whose answer was lost may still be
	// handled after the client gave up, if it was stuck behind a fault (a
	// paused member, a stalled link); it is assumed handled no later than
	// this after the last fault in effect while it was outstanding ended.
	BacklogSlack time.Duration
	// GapThreshold: a time between two commits longer than this counts in
	// full as time without a leader (see Availability).
	GapThreshold time.Duration
	// ClockFault is the detail prefix of the fault that runs the members'
	// lease clocks at other rates than the workload's ("": none). A
	// promise in effect during one is judged as its holder may use it, on
	// the holder's clock (the checker's), less DriftMargin of its TTL: the
	// issuer keeps it on its own clock, which may run faster by as much as
	// the margin allows (internal/drift).
	ClockFault  string
	DriftMargin func(ttl time.Duration) time.Duration
}

// The lease checker's rules, as Anomaly.Rule names them.
const (
	RuleEarly = "early" // gone before a promise ran out
	RuleBound = "bound" // alive past the bound
	RuleFinal = "final" // alive again after evidence of its end, or after an acknowledged revoke
)

// The lease checker's Result.Counts.
const (
	CountLeases  = "leases"   // leases granted (acknowledged grants)
	CountGone    = "gone"     // of them, seen gone
	CountRevoked = "revoked"  // of them, revoked by their holder
	CountTerms   = "new-term" // of them, seen gone after a new term began in their life (a leader change)
)

type proof struct {
	at   int64 // when it is known to hold: a death by `at`, life at or after `at`
	op   history.Op
	what string
}

type leaseRec struct {
	id     int64
	key    string
	ttl    int64 // granted
	grant  history.Op
	put    *history.Op
	ops    []history.Op
	events []history.Op
}

// Leases checks the lease promises:
//   - never early: no evidence that a lease was gone before TTL had passed
//     since the send time of a grant or keep-alive the cluster acknowledged
//     (unless the client had sent a revoke by then);
//   - bounded: no evidence that a lease still lived after
//     T + TTL + CheckpointAfter + Tick + CommitSlack + time without a leader
//     in between, T being the last time the cluster could have renewed it
//     (the answer time of the last acknowledged keep-alive, or later for a
//     keep-alive with a lost answer, see BacklogSlack);
//   - final: once there is evidence that a lease is gone (TimeToLive -1,
//     keep-alive "not found", its key deleted or absent) nothing shows it
//     alive again, and nothing shows it alive after an acknowledged revoke.
//
// Each anomaly names its rule (RuleEarly, RuleBound, RuleFinal), and
// Result.Counts holds CountLeases, CountGone, CountRevoked and CountTerms
// (a new term is one the history's status records first report inside
// the lease's life, from its grant to the first evidence of its end).
//
// Evidence of death: TimeToLive -1, keep-alive or revoke "not found", a
// delete event of its key, a read that finds its key absent after the put
// attaching it was acknowledged; all hold by the end of the op (receive
// time of the event). Evidence of life: a keep-alive answered with TTL > 0,
// TimeToLive >= 0, a read that finds its key; all hold at or after the
// start of the op.
func Leases(ops []history.Op, cfg LeaseConfig, avail *Availability, faults Faults) Result {
	r := Result{Name: "lease"}
	leases := map[int64]*leaseRec{}
	byKey := map[string]*leaseRec{}
	for _, op := range ops {
		if op.Kind == history.KindGrant && op.Result == history.OK {
			l := &leaseRec{id: op.Lease, key: op.Key, ttl: op.TTL, grant: op}
			leases[op.Lease] = l
			byKey[op.Key] = l
		}
	}
	var terms []history.Op
	for _, op := range ops {
		switch op.Kind {
		case history.KindLeasePut, history.KindKeep, history.KindRevoke, history.KindTTL, history.KindLeaseGet:
			l := leases[op.Lease]
			if l == nil {
				continue
			}
			if op.Kind == history.KindLeasePut {
				l.put = &op
			} else {
				l.ops = append(l.ops, op)
			}
		case history.KindWatch, history.KindHistory:
			if l := byKey[op.Key]; l != nil && strings.HasPrefix(op.Key, cfg.Prefix) {
				l.events = append(l.events, op)
			}
		case history.KindStatus:
			if op.Result == history.OK {
				terms = append(terms, op)
			}
		}
	}
	ids := make([]int64, 0, len(leases))
	for id := range leases {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var lateness []int64
	var unresolved, revoked, skewed, newTerm int
	earliest, closest, skewEarliest := int64(1<<62), int64(1<<62), int64(1<<62)
	for _, id := range ids {
		l := leases[id]
		m := checkLease(&r, l, cfg, avail, faults, terms)
		if m.revoked {
			revoked++
		}
		if m.newTerm {
			newTerm++
		}
		if !m.dead {
			unresolved++
		} else if m.late != nil {
			lateness = append(lateness, *m.late)
		}
		if m.early != nil {
			earliest = min(earliest, *m.early)
			if m.skewed {
				skewed++
				skewEarliest = min(skewEarliest, *m.early)
			}
		}
		if m.bound != nil {
			closest = min(closest, *m.bound)
		}
		r.Details = append(r.Details, m.line)
	}
	r.Counts = map[string]int{CountLeases: len(leases), CountGone: len(leases) - unresolved, CountRevoked: revoked, CountTerms: newTerm}
	r.stat("%d leases granted, %d revoked by their holder, %d never seen gone", len(leases), revoked, unresolved)
	if earliest < 1<<62 {
		r.stat("closest to early: first evidence of expiry %s after the last promise ran out", history.Dur(earliest))
	}
	if skewEarliest < 1<<62 {
		r.stat("under clock rates that differ (%s): %d leases ended on their own, closest to early %s after the last promise ran out (allowed: down to minus the drift margin, 1%% of the TTL + 50 ms)",
			strings.TrimSuffix(cfg.ClockFault, ":"), skewed, history.Dur(skewEarliest))
	}
	if closest < 1<<62 {
		r.stat("closest to the bound: first evidence of expiry %s before the bound", history.Dur(closest))
	}
	if len(lateness) > 0 {
		sort.Slice(lateness, func(i, j int) bool { return lateness[i] < lateness[j] })
		r.stat("first evidence of expiry after last renewal + TTL (includes 200 ms polling): p50 %s, p90 %s, max %s over %d leases",
			history.Dur(lateness[len(lateness)/2]), history.Dur(lateness[len(lateness)*9/10]), history.Dur(lateness[len(lateness)-1]), len(lateness))
	}
	return r
}

func sec(s int64) int64 { return s * int64(time.Second) }

// leaseMargins is what one lease's check measured.
type leaseMargins struct {
	dead, revoked bool
	// late: first evidence of death after last acknowledged renewal + TTL,
	// for leases that expired on their own with every answer received.
	late *int64
	// early: first evidence of death after the last promise ran out.
	early *int64
	// bound: the bound minus the first evidence of death.
	bound *int64
	// skewed: a promise was judged with the drift margin (ClockFault).
	skewed bool
	// newTerm: a term began between the grant and the first evidence of
	// death.
	newTerm bool
	line    string
}

// checkLease checks one lease.
func checkLease(r *Result, l *leaseRec, cfg LeaseConfig, avail *Availability, faults Faults, terms []history.Op) leaseMargins {
	var deaths, alives, promises []proof
	revokeSent, revokeAcked := int64(1<<62), int64(1<<62)
	// The last time the cluster could have renewed the lease.
	last := l.grant.End
	lastAcked := l.grant.End
	promises = append(promises, proof{at: l.grant.Start + sec(l.ttl), op: l.grant, what: "grant"})
	for _, op := range l.ops {
		switch op.Kind {
		case history.KindKeep:
			switch op.Result {
			case history.OK:
				promises = append(promises, proof{at: op.Start + sec(op.TTL), op: op, what: "keep-alive"})
				alives = append(alives, proof{at: op.Start, op: op, what: "keep-alive answered"})
				last = max(last, op.End)
				lastAcked = max(lastAcked, op.End)
			case history.Fail:
				deaths = append(deaths, proof{at: op.End, op: op, what: "keep-alive: not found"})
			case history.Unknown:
				last = max(last, op.End, faults.LatestEnd(op.Start, op.End)+int64(cfg.BacklogSlack))
			}
		case history.KindRevoke:
			revokeSent = min(revokeSent, op.Start)
			switch op.Result {
			case history.OK:
				revokeAcked = min(revokeAcked, op.End)
			case history.Fail:
				deaths = append(deaths, proof{at: op.End, op: op, what: "revoke: not found"})
			}
		case history.KindTTL:
			if op.Result != history.OK {
				continue
			}
			if op.TTL == -1 {
				deaths = append(deaths, proof{at: op.End, op: op, what: "TimeToLive -1"})
			} else {
				alives = append(alives, proof{at: op.Start, op: op, what: fmt.Sprintf("TimeToLive %d", op.TTL)})
			}
		case history.KindLeaseGet:
			if op.Result != history.OK {
				continue
			}
			if op.Found {
				alives = append(alives, proof{at: op.Start, op: op, what: "its key is there"})
			} else if l.put != nil && l.put.Result == history.OK && l.put.End < op.Start {
				deaths = append(deaths, proof{at: op.End, op: op, what: "its key is gone"})
			}
		}
	}
	for _, ev := range l.events {
		if ev.Event == "delete" {
			deaths = append(deaths, proof{at: ev.Start, op: ev, what: "delete event of its key"})
		}
	}
	byAt := func(a, b proof) int { return int(a.at - b.at) }
	slices.SortFunc(deaths, byAt)
	slices.SortFunc(alives, byAt)
	name := fmt.Sprintf("lease %x (TTL %ds, key %s)", l.id, l.ttl, l.key)

	skewed := false
	if len(deaths) > 0 {
		d := deaths[0]
		// Never early: a death before a promise ran out, where the promise
		// was made before the death (else it is a comeback, below).
		for _, p := range promises {
			if d.at >= revokeSent || d.at < p.op.Start {
				continue
			}
			due, allowed := p.at, ""
			if cfg.ClockFault != "" && faults.Has(cfg.ClockFault, p.op.Start, d.at) {
				margin := cfg.DriftMargin(time.Duration(p.at - p.op.Start))
				due -= int64(margin)
				skewed = true
				allowed = fmt.Sprintf(", more than the drift margin of %s that clock rates differing allow", margin)
			}
			if d.at < due {
				r.addRule(RuleEarly, fmt.Sprintf("%s gone early: %s by %s, but the %s sent at %s promised it until %s (%s early%s); faults: %s",
					name, d.what, history.Dur(d.at), p.what, history.Dur(p.op.Start), history.Dur(p.at), history.Dur(p.at-d.at), allowed,
					strings.Join(faults.During(p.op.Start, d.at), "; ")), p.op, d.op)
				break
			}
		}
		// Final: nothing alive after the first evidence of death.
		for _, a := range alives {
			if a.at > d.at {
				r.addRule(RuleFinal, fmt.Sprintf("%s came back: %s by %s, then %s at %s", name, d.what, history.Dur(d.at), a.what, history.Dur(a.at)), d.op, a.op)
				break
			}
		}
	}
	for _, a := range alives {
		if a.at > revokeAcked {
			r.addRule(RuleFinal, fmt.Sprintf("%s alive after its revoke was acknowledged at %s: %s at %s", name, history.Dur(revokeAcked), a.what, history.Dur(a.at)), a.op)
			break
		}
	}

	// Bounded: the fixpoint of U = last + TTL + fixed bounds + time
	// without a leader in [last, U].
	fixed := sec(l.ttl) + int64(cfg.CheckpointAfter+cfg.Tick+cfg.CommitSlack)
	u := last + fixed
	for range 20 {
		next := last + fixed + avail.Unavailable(last, u)
		if next == u {
			break
		}
		u = next
	}
	for _, a := range alives {
		if a.at > u {
			changes := termsBetween(terms, last, a.at)
			r.addRule(RuleBound, fmt.Sprintf("%s outlived its bound: could last be renewed at %s, bound %s (TTL + %s + %s without a leader), but %s at %s (%s past the bound); %d new terms seen in between; faults: %s",
				name, history.Dur(last), history.Dur(u), time.Duration(cfg.CheckpointAfter+cfg.Tick+cfg.CommitSlack),
				history.Dur(avail.Unavailable(last, u)), a.what, history.Dur(a.at), history.Dur(a.at-u), changes,
				strings.Join(faults.During(last, a.at), "; ")), a.op)
			break
		}
	}

	m := leaseMargins{dead: len(deaths) > 0, revoked: revokeSent < 1<<62, skewed: skewed}
	promised := int64(0)
	for _, p := range promises {
		promised = max(promised, p.at)
	}
	m.line = fmt.Sprintf("lease %x ttl=%d key=%s granted=%s last-renewal=%s (acked %s) promised-until=%s bound=%s (%s without a leader)",
		l.id, l.ttl, l.key, history.Dur(l.grant.End), history.Dur(last), history.Dur(lastAcked), history.Dur(promised),
		history.Dur(u), history.Dur(avail.Unavailable(last, u)))
	if m.revoked {
		m.line += " revoke-sent=" + history.Dur(revokeSent)
	}
	if !m.dead {
		m.line += " never seen gone"
		return m
	}
	d := deaths[0]
	m.newTerm = termsBetween(terms, l.grant.Start, d.at) > 0
	m.line += fmt.Sprintf(" gone-by=%s (%s)", history.Dur(d.at), d.what)
	if m.revoked {
		return m
	}
	early, bound := d.at-promised, u-d.at
	m.early, m.bound = &early, &bound
	if last == lastAcked { // else a lost keep-alive makes the lateness unknown
		late := d.at - (lastAcked + sec(l.ttl))
		m.late = &late
	}
	return m
}

// termsBetween counts the distinct terms first reported in (a, b).
func termsBetween(status []history.Op, a, b int64) int {
	first := map[uint64]int64{}
	for _, op := range status {
		if t, ok := first[op.Term]; !ok || op.End < t {
			first[op.Term] = op.End
		}
	}
	n := 0
	for _, t := range first {
		if t > a && t < b {
			n++
		}
	}
	return n
}

package checker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

type event struct {
	rev   int64
	key   string
	kind  string
	value string
	op    history.Op
}

func (e event) same(o event) bool {
	return e.rev == o.rev && e.key == o.key && e.kind == o.kind && e.value == o.value
}

func (e event) String() string {
	if e.kind == "put" {
		return fmt.Sprintf("rev %d put %s=%s", e.rev, e.key, e.value)
	}
	return fmt.Sprintf("rev %d %s %s", e.rev, e.kind, e.key)
}

// WatchConfig says which keys the workloads write and how.
type WatchConfig struct {
	Prefix      string // what the watchers watch
	LeasePrefix string // the only keys anything deletes (by lease expiry or revoke)
	MarkerKey   string // written last; watchers and histories end with it
}

// Watch checks the watch workload. The reference is the full history: a
// fresh watch from revision 1 through each member at the end, which must
// be identical across members. Against it:
//   - every acknowledged write appears, at its revision, with its value;
//     nothing appears that no client wrote; a CAS that answered "not
//     swapped" does not appear; only lease keys are ever deleted;
//   - every resuming watcher saw exactly the reference, in order, each
//     event once, up to the marker.
func Watch(ops []history.Op, cfg WatchConfig) Result {
	r := Result{Name: "watch"}
	full := map[int][]event{}
	watched := map[int][]event{}
	watcherMember := map[int]int{}
	for _, op := range ops {
		switch op.Kind {
		case history.KindHistory:
			full[op.Member] = append(full[op.Member], toEvent(op))
		case history.KindWatch:
			watched[op.Process] = append(watched[op.Process], toEvent(op))
			watcherMember[op.Process] = op.Member
		}
	}
	// ops is sorted by start time; events of one stream must be in the
	// order they arrived, which is their ID order.
	for _, evs := range full {
		slices.SortStableFunc(evs, func(a, b event) int { return int(a.op.ID - b.op.ID) })
	}
	for _, evs := range watched {
		slices.SortStableFunc(evs, func(a, b event) int { return int(a.op.ID - b.op.ID) })
	}
	members := make([]int, 0, len(full))
	for m := range full {
		members = append(members, m)
	}
	slices.Sort(members)
	if len(members) == 0 {
		r.add("no full history was read: watch completeness cannot be checked")
		return r
	}
	ref := full[members[0]]
	markerRev := int64(0)
	for _, e := range ref {
		if e.key == cfg.MarkerKey {
			markerRev = e.rev
			break
		}
	}
	if markerRev == 0 {
		r.add(fmt.Sprintf("the full history through member %d does not reach the marker", members[0]+1))
		return r
	}
	ref = upTo(ref, markerRev)
	for _, m := range members[1:] {
		if i, what := diff(ref, upTo(full[m], markerRev)); what != "" {
			r.add(fmt.Sprintf("members %d and %d disagree on the history at event %d: %s", members[0]+1, m+1, i, what))
		}
	}
	checkOrder(&r, fmt.Sprintf("the full history through member %d", members[0]+1), ref)
	checkWrites(&r, ops, ref, markerRev, cfg)

	var watchers []int
	for p := range watched {
		watchers = append(watchers, p)
	}
	slices.Sort(watchers)
	var total int
	for _, p := range watchers {
		evs := watched[p]
		name := fmt.Sprintf("watcher p%d through member %d", p, watcherMember[p]+1)
		checkOrder(&r, name, evs)
		evs = upTo(evs, markerRev)
		total += len(evs)
		if len(evs) == 0 || evs[len(evs)-1].rev != markerRev {
			last := int64(0)
			if len(evs) > 0 {
				last = evs[len(evs)-1].rev
			}
			r.add(fmt.Sprintf("%s never caught up: last event at revision %d, marker at %d", name, last, markerRev))
		}
		if i, what := diff(ref, evs); what != "" && !(len(evs) < len(ref) && i == len(evs)) {
			r.add(fmt.Sprintf("%s differs from the full history at event %d: %s", name, i, what), opsAt(evs, i)...)
		}
	}
	r.stat("%d events up to revision %d; %d members' histories compared; %d watchers saw %d events",
		len(ref), markerRev, len(members), len(watchers), total)
	return r
}

func toEvent(op history.Op) event {
	return event{rev: op.Rev, key: op.Key, kind: op.Event, value: op.Value, op: op}
}

func upTo(evs []event, rev int64) []event {
	for i, e := range evs {
		if e.rev > rev {
			return evs[:i]
		}
	}
	return evs
}

func opsAt(evs []event, i int) []history.Op {
	var out []history.Op
	for j := max(0, i-1); j < min(len(evs), i+2); j++ {
		out = append(out, evs[j].op)
	}
	return out
}

// diff finds the first difference of b from a.
func diff(a, b []event) (int, string) {
	for i := 0; i < min(len(a), len(b)); i++ {
		if !a[i].same(b[i]) {
			return i, fmt.Sprintf("expected %s, got %s", a[i], b[i])
		}
	}
	switch {
	case len(a) > len(b):
		return len(b), fmt.Sprintf("missing %d events from %s on", len(a)-len(b), a[len(b)])
	case len(b) > len(a):
		return len(a), fmt.Sprintf("%d extra events from %s on", len(b)-len(a), b[len(a)])
	}
	return 0, ""
}

// checkOrder: revisions never go back, and no (revision, key) twice.
func checkOrder(r *Result, name string, evs []event) {
	seen := map[[2]string]bool{}
	var dups, backs int
	for i, e := range evs {
		k := [2]string{fmt.Sprint(e.rev), e.key}
		if seen[k] {
			if dups == 0 {
				r.add(fmt.Sprintf("%s delivered %s twice", name, e), e.op)
			}
			dups++
		}
		seen[k] = true
		if i > 0 && e.rev < evs[i-1].rev {
			if backs == 0 {
				r.add(fmt.Sprintf("%s went back in revisions: %s after %s", name, e, evs[i-1]), evs[i-1].op, e.op)
			}
			backs++
		}
	}
	if dups > 1 || backs > 1 {
		r.add(fmt.Sprintf("%s: %d duplicate events, %d out of order in all", name, dups, backs))
	}
}

// checkWrites compares the reference history with what clients wrote.
func checkWrites(r *Result, ops []history.Op, ref []event, markerRev int64, cfg WatchConfig) {
	byRevKey := map[[2]string]event{}
	for _, e := range ref {
		byRevKey[[2]string{fmt.Sprint(e.rev), e.key}] = e
	}
	attempted := map[[2]string]history.Op{} // (key, value) -> write
	var acked, missing int
	for _, op := range ops {
		if !strings.HasPrefix(op.Key, cfg.Prefix) {
			continue
		}
		switch op.Kind {
		case history.KindPut, history.KindCASValue, history.KindCASRev, history.KindAdd, history.KindLeasePut, history.KindFinal:
		default:
			continue
		}
		attempted[[2]string{op.Key, op.Value}] = op
		ok := op.Result == history.OK && (op.Swapped || (op.Kind != history.KindCASValue && op.Kind != history.KindCASRev))
		if !ok || op.Rev > markerRev || op.Rev == 0 {
			continue
		}
		acked++
		e, found := byRevKey[[2]string{fmt.Sprint(op.Rev), op.Key}]
		switch {
		case !found:
			missing++
			if missing <= 10 {
				r.add(fmt.Sprintf("acknowledged write of %s at revision %d is not in the history", op.Key, op.Rev), op)
			}
		case e.kind != "put" || e.value != op.Value:
			r.add(fmt.Sprintf("acknowledged write of %s=%s at revision %d, but the history has %s", op.Key, op.Value, op.Rev, e), op, e.op)
		}
	}
	if missing > 10 {
		r.add(fmt.Sprintf("%d acknowledged writes missing from the history in all", missing))
	}
	var phantoms int
	applied := map[[2]string]event{}
	for _, e := range ref {
		switch e.kind {
		case "put":
			// Every value is written once by one request: seeing it twice
			// means one request was applied twice.
			kv := [2]string{e.key, e.value}
			if first, twice := applied[kv]; twice {
				w := attempted[kv]
				r.add(fmt.Sprintf("one write applied twice: %s and %s", first, e), w, first.op, e.op)
			}
			applied[kv] = e
			w, ok := attempted[[2]string{e.key, e.value}]
			switch {
			case !ok:
				phantoms++
				if phantoms <= 10 {
					r.add(fmt.Sprintf("the history has a write no client made: %s", e), e.op)
				}
			case (w.Kind == history.KindCASValue || w.Kind == history.KindCASRev) && w.Result == history.OK && !w.Swapped:
				r.add(fmt.Sprintf("a CAS answered \"not swapped\" but its write is in the history: %s", e), w, e.op)
			}
		case "delete":
			if !strings.HasPrefix(e.key, cfg.LeasePrefix) {
				r.add(fmt.Sprintf("the history deletes a key that nothing deletes: %s", e), e.op)
			}
		}
	}
	r.stat("%d acknowledged writes found in the history", acked-missing)
}

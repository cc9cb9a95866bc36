package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/drift"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

const ms = int64(time.Millisecond)

// h numbers ops and fills the defaults a recorder would.
func h(ops ...history.Op) []history.Op {
	for i := range ops {
		ops[i].ID = int64(i + 1)
		if ops[i].Result == "" {
			ops[i].Result = history.OK
		}
	}
	return ops
}

func put(p int, key, v string, start, end, rev int64) history.Op {
	return history.Op{Process: p, Kind: history.KindPut, Key: key, Value: v, Start: start * ms, End: end * ms, Rev: rev}
}

func get(p int, key, v string, start, end, rev int64) history.Op {
	return history.Op{Process: p, Kind: history.KindGet, Key: key, Value: v, Start: start * ms, End: end * ms, Rev: rev}
}

func TestLinearizable(t *testing.T) {
	unknown := func(op history.Op) history.Op {
		op.Result, op.Rev = history.Unknown, 0
		return op
	}
	casRev := func(p int, key, v string, expect int64, start, end int64, swapped bool, rev int64, read string, readRev int64) history.Op {
		return history.Op{Process: p, Kind: history.KindCASRev, Key: key, Value: v, ExpectRev: expect, Start: start * ms, End: end * ms,
			Swapped: swapped, Rev: rev, Found: read != "", Read: read, ReadRev: readRev}
	}
	for _, tc := range []struct {
		name  string
		ops   []history.Op
		valid bool
	}{
		{"sequential", h(put(1, "k", "1", 0, 10, 2), get(2, "k", "1", 20, 30, 2)), true},
		{"stale read", h(put(1, "k", "1", 0, 10, 2), put(1, "k", "2", 20, 30, 3), get(2, "k", "1", 40, 50, 2)), false},
		{"read of the initial state", h(get(1, "k", "", 0, 10, 0)), true},
		{"concurrent read may see either", h(put(1, "k", "1", 0, 10, 2), put(1, "k", "2", 20, 50, 3), get(2, "k", "1", 30, 40, 2)), true},
		{"wrong revision", h(put(1, "k", "1", 0, 10, 2), get(2, "k", "1", 20, 30, 5)), false},
		{"revisions go back", h(put(1, "k", "1", 0, 10, 5), put(1, "k", "2", 20, 30, 3)), false},
		{"indeterminate write seen later", h(unknown(put(1, "k", "1", 0, 10, 0)), get(2, "k", "1", 100, 110, 7)), true},
		{"indeterminate write never seen", h(unknown(put(1, "k", "1", 0, 10, 0)), get(2, "k", "", 100, 110, 0)), true},
		{"indeterminate write seen, then unseen", h(unknown(put(1, "k", "1", 0, 10, 0)), get(2, "k", "1", 100, 110, 7), get(2, "k", "", 120, 130, 0)), false},
		{"cas on revision", h(put(1, "k", "1", 0, 10, 2), casRev(2, "k", "2", 2, 20, 30, true, 3, "", 0), get(1, "k", "2", 40, 50, 3)), true},
		{"cas on a stale revision must fail", h(put(1, "k", "1", 0, 10, 2), put(1, "k", "2", 20, 30, 3), casRev(2, "k", "3", 2, 40, 50, true, 4, "", 0)), false},
		{"failed cas reports what it saw", h(put(1, "k", "1", 0, 10, 2), put(1, "k", "2", 20, 30, 3), casRev(2, "k", "3", 2, 40, 50, false, 0, "2", 3)), true},
		{"failed cas saw a stale value", h(put(1, "k", "1", 0, 10, 2), put(1, "k", "2", 20, 30, 3), casRev(2, "k", "3", 2, 40, 50, false, 0, "1", 2)), false},
		{"absent key compares as revision 0", h(casRev(1, "k", "1", 0, 0, 10, true, 2, "", 0), get(1, "k", "1", 20, 30, 2)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Linearizable(tc.ops, "k", 10*time.Second, t.TempDir())
			if r.Valid() != tc.valid {
				t.Fatalf("valid=%v, want %v: %v %v", r.Valid(), tc.valid, r.Anomalies, r.Stats)
			}
		})
	}
}

func leaseOps(extra ...history.Op) []history.Op {
	const id, key = 7, "jl/lease/1"
	base := []history.Op{
		{Process: 1, Kind: history.KindGrant, Key: key, Lease: id, TTL: 3, Start: 0, End: 10 * ms},
		{Process: 1, Kind: history.KindLeasePut, Key: key, Lease: id, Start: 20 * ms, End: 30 * ms, Rev: 2},
		{Process: 1, Kind: history.KindKeep, Key: key, Lease: id, TTL: 3, Start: 1000 * ms, End: 1010 * ms},
	}
	for i := range extra {
		extra[i].Key, extra[i].Lease, extra[i].Process = key, id, 1
	}
	return h(append(base, extra...)...)
}

func leaseCheck(ops []history.Op) Result {
	// Commits every 100 ms throughout, so no time without a leader.
	var all []history.Op
	for t := int64(0); t < 20000; t += 100 {
		all = append(all, history.Op{Kind: history.KindCanary, Result: history.OK, Start: t * ms, End: t * ms})
	}
	all = append(all, ops...)
	cfg := LeaseConfig{Prefix: "jl/lease/", Tick: 100 * time.Millisecond, CheckpointAfter: time.Second,
		CommitSlack: 250 * time.Millisecond, BacklogSlack: time.Second, GapThreshold: 300 * time.Millisecond,
		ClockFault: "clock-rate:", DriftMargin: drift.Margin}
	return Leases(all, cfg, AvailabilityOf(all, cfg.GapThreshold), FaultsOf(all))
}

func TestLeases(t *testing.T) {
	ttl := func(v int64, start, end int64) history.Op {
		return history.Op{Kind: history.KindTTL, TTL: v, Start: start * ms, End: end * ms, Result: history.OK}
	}
	gone := func(start, end int64) history.Op {
		return history.Op{Kind: history.KindLeaseGet, Start: start * ms, End: end * ms, Result: history.OK}
	}
	rates := func(start, end int64) history.Op {
		return history.Op{Kind: history.KindFault, Start: start * ms, End: end * ms, Result: history.OK, Detail: "clock-rate: spread 0.02: m1=1.0200"}
	}
	for _, tc := range []struct {
		name string
		ops  []history.Op
		want string // "" = valid, else a part of the anomaly
	}{
		{"expires on time", leaseOps(ttl(1, 3500, 3510), ttl(-1, 4050, 4060), gone(4070, 4080)), ""},
		{"gone early", leaseOps(ttl(-1, 3900, 3950)), "gone early"},
		{"key gone early", leaseOps(gone(3500, 3600)), "gone early"},
		{"comes back", leaseOps(ttl(-1, 4050, 4060), ttl(1, 4100, 4110)), "came back"},
		{"outlives the bound", leaseOps(ttl(1, 5500, 5510)), "outlived its bound"},
		{"within the bound", leaseOps(ttl(0, 5300, 5310), ttl(-1, 5400, 5410)), ""},
		{"revoked early is fine", leaseOps(history.Op{Kind: history.KindRevoke, Start: 1500 * ms, End: 1510 * ms, Result: history.OK}, ttl(-1, 1600, 1610)), ""},
		{"alive after revoke", leaseOps(history.Op{Kind: history.KindRevoke, Start: 1500 * ms, End: 1510 * ms, Result: history.OK}, ttl(2, 1600, 1610)), "alive after its revoke"},
		// The keep-alive sent at 1000 ms promised 4000 ms; the drift margin
		// of a 3 s TTL is 80 ms.
		{"early within the margin while clock rates differ", leaseOps(rates(0, 5000), ttl(-1, 3900, 3930)), ""},
		{"early past the margin while clock rates differ", leaseOps(rates(0, 5000), ttl(-1, 3900, 3910)), "more than the drift margin of 80ms"},
		{"early within the margin with no clock-rate fault", leaseOps(rates(4100, 5000), ttl(-1, 3900, 3930)), "gone early"},
		{"a lost keep-alive may renew later", leaseOps(history.Op{Kind: history.KindKeep, Start: 2000 * ms, End: 4000 * ms, Result: history.Unknown}, ttl(1, 6000, 6010)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := leaseCheck(tc.ops)
			got := ""
			for _, a := range r.Anomalies {
				got += a.What + "\n"
			}
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("anomalies:\n%s\nwant %q", got, tc.want)
			}
		})
	}
}

func TestWatch(t *testing.T) {
	cfg := WatchConfig{Prefix: "jl/", LeasePrefix: "jl/lease/", MarkerKey: "jl/zz"}
	ev := func(kind string, p, member int, key, v string, rev int64) history.Op {
		return history.Op{Kind: kind, Process: p, Member: member, Key: key, Value: v, Rev: rev, Event: "put"}
	}
	writes := []history.Op{put(9, "jl/a", "1", 0, 1, 2), put(9, "jl/b", "2", 2, 3, 3), {Kind: history.KindFinal, Key: "jl/zz", Value: "3", Rev: 4}}
	full := func(member int) []history.Op {
		return []history.Op{ev(history.KindHistory, 100+member, member, "jl/a", "1", 2), ev(history.KindHistory, 100+member, member, "jl/b", "2", 3), ev(history.KindHistory, 100+member, member, "jl/zz", "3", 4)}
	}
	watcher := []history.Op{ev(history.KindWatch, 1, 0, "jl/a", "1", 2), ev(history.KindWatch, 1, 0, "jl/b", "2", 3), ev(history.KindWatch, 1, 0, "jl/zz", "3", 4)}
	ok := h(append(append(append(append([]history.Op{}, writes...), full(0)...), full(1)...), watcher...)...)
	if r := Watch(ok, cfg); !r.Valid() {
		t.Fatalf("valid history: %v", r.Anomalies)
	}
	missed := h(append(append(append([]history.Op{}, writes...), full(0)...), watcher[0], watcher[2])...)
	if r := Watch(missed, cfg); r.Valid() {
		t.Fatal("a watcher that missed an event passed")
	}
	dup := h(append(append(append([]history.Op{}, writes...), full(0)...), watcher[0], watcher[1], watcher[1], watcher[2])...)
	if r := Watch(dup, cfg); r.Valid() {
		t.Fatal("a watcher that saw an event twice passed")
	}
	twice := full(0)
	twice = append(twice[:2], ev(history.KindHistory, 100, 0, "jl/b", "2", 4), ev(history.KindHistory, 100, 0, "jl/zz", "3", 5))
	writes[2].Rev = 5
	r := Watch(h(append(append([]history.Op{}, writes...), twice...)...), cfg)
	if !strings.Contains(anomalies(r), "applied twice") {
		t.Fatalf("a write applied twice passed: %v", r.Anomalies)
	}
}

func anomalies(r Result) string {
	var s []string
	for _, a := range r.Anomalies {
		s = append(s, a.What)
	}
	return strings.Join(s, "\n")
}

func TestSet(t *testing.T) {
	adds := []history.Op{
		{Kind: history.KindAdd, Key: "s/1", Value: "1", Result: history.OK},
		{Kind: history.KindAdd, Key: "s/2", Value: "2", Result: history.Unknown},
		{Kind: history.KindAdd, Key: "s/3", Value: "3", Result: history.OK},
	}
	read := func(keys ...string) history.Op {
		op := history.Op{Kind: history.KindRead, Key: "s/", Result: history.OK}
		for _, k := range keys {
			op.Keys = append(op.Keys, k)
			op.Values = append(op.Values, strings.TrimPrefix(k, "s/"))
		}
		return op
	}
	if r := Set(h(append(append([]history.Op{}, adds...), read("s/1", "s/3"))...), "s/"); !r.Valid() {
		t.Fatalf("valid set: %v", r.Anomalies)
	}
	if r := Set(h(append(append([]history.Op{}, adds...), read("s/1"))...), "s/"); r.Valid() {
		t.Fatal("a lost add passed")
	}
	if r := Set(h(append(append([]history.Op{}, adds...), read("s/1", "s/3", "s/4"))...), "s/"); r.Valid() {
		t.Fatal("a phantom key passed")
	}
}

func TestUnavailable(t *testing.T) {
	var ops []history.Op
	for _, at := range []int64{0, 100, 200, 1200, 1300, 3000} {
		ops = append(ops, history.Op{Kind: history.KindCanary, Result: history.OK, End: at * ms})
	}
	a := AvailabilityOf(ops, 300*time.Millisecond)
	for _, tc := range []struct{ from, to, want int64 }{
		{0, 200, 0},
		{0, 3000, 1000 + 1700},
		{500, 700, 200},
		{1250, 1300, 0},
		{2900, 5000, 100}, // nothing is known after the history ends
	} {
		if got := a.Unavailable(tc.from*ms, tc.to*ms) / ms; got != tc.want {
			t.Errorf("Unavailable(%d, %d) = %d ms, want %d", tc.from, tc.to, got, tc.want)
		}
	}
}

// TestLeaseRulesAndCounts: scripts/etcd-robustness weighs the lease
// checker's anomalies by rule (on etcd a broken bound is etcd's known
// behaviour) and reports its counts.
func TestLeaseRulesAndCounts(t *testing.T) {
	ttl := func(v int64, start, end int64) history.Op {
		return history.Op{Kind: history.KindTTL, TTL: v, Start: start * ms, End: end * ms, Result: history.OK}
	}
	status := func(term uint64, at int64) history.Op {
		return history.Op{Kind: history.KindStatus, Leader: 1, Term: term, Start: at * ms, End: at * ms, Result: history.OK}
	}
	for _, tc := range []struct {
		name    string
		ops     []history.Op
		rule    string // "" = valid
		gone    int
		newTerm int
	}{
		{"on time", leaseOps(ttl(-1, 4050, 4060)), "", 1, 0},
		{"on time after a leader change", leaseOps(status(2, 0), status(3, 2000), ttl(-1, 4050, 4060)), "", 1, 1},
		{"the leader changed after it was gone", leaseOps(status(2, 0), status(3, 4100), ttl(-1, 4050, 4060)), "", 1, 0},
		{"early", leaseOps(ttl(-1, 3900, 3950)), RuleEarly, 1, 0},
		{"past the bound", leaseOps(status(2, 0), status(3, 2000), ttl(1, 5500, 5510), ttl(-1, 5600, 5610)), RuleBound, 1, 1},
		{"back", leaseOps(ttl(-1, 4050, 4060), ttl(1, 4100, 4110)), RuleFinal, 1, 0},
		{"never seen gone", leaseOps(ttl(1, 3500, 3510)), "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := leaseCheck(tc.ops)
			var rules []string
			for _, a := range r.Anomalies {
				rules = append(rules, a.Rule)
			}
			if tc.rule == "" && len(rules) > 0 || tc.rule != "" && (len(rules) != 1 || rules[0] != tc.rule) {
				t.Fatalf("rules %q, want %q: %v", rules, tc.rule, r.Anomalies)
			}
			want := map[string]int{CountLeases: 1, CountGone: tc.gone, CountRevoked: 0, CountTerms: tc.newTerm}
			for k, v := range want {
				if r.Counts[k] != v {
					t.Errorf("Counts[%s] = %d, want %d (%v)", k, r.Counts[k], v, r.Counts)
				}
			}
		})
	}
}

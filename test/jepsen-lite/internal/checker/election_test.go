package checker

import (
	"strings"
	"testing"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

func act(prefix string, token, at int64) history.Op {
	return history.Op{Kind: history.KindAct, Key: prefix, Token: token, Start: at * ms, End: at * ms}
}

func fenced(prefix string, token, rev int64, committed bool) history.Op {
	return history.Op{Kind: history.KindFencedPut, Key: prefix, Token: token, Rev: rev, Swapped: committed}
}

func TestElection(t *testing.T) {
	const lib, naive = "jlelect/library", "jlelect/naive"
	modes := []ElectionMode{{Name: "library", Prefix: lib, Strict: true}, {Name: "naive", Prefix: naive}}
	for _, tc := range []struct {
		name      string
		ops       []history.Op
		want      map[string]ElectionCounts // only the fields compared below
		anomalies []string                  // parts of the anomalies, in order
	}{
		{
			name: "hand-over in order",
			ops: h(act(lib, 10, 0), act(lib, 10, 5), fenced(lib, 10, 11, true), act(lib, 20, 6), act(lib, 20, 11), fenced(lib, 20, 21, true),
				fenced(lib, 10, 22, false)),
			want: map[string]ElectionCounts{"library": {Actions: 4}},
		},
		{
			name: "the same instant is not stale",
			ops:  h(act(lib, 10, 5), act(lib, 20, 5)),
			want: map[string]ElectionCounts{"library": {Actions: 2}},
		},
		{
			name:      "a paused library holder acts after its successor",
			ops:       h(act(lib, 10, 0), act(lib, 20, 100), act(lib, 10, 2600), act(lib, 10, 2605), act(lib, 20, 2610)),
			want:      map[string]ElectionCounts{"library": {Actions: 5, Stale: 2, MaxStaleness: 2505 * ms}},
			anomalies: []string{"library: token 10 acted 2 times after a later token began, the last 2.505s after"},
		},
		{
			name: "the successor is the earliest of every later token",
			// 30 began before 20; 10 acting at 150 is stale against 30
			// (at 100) even though 20 began only at 200.
			ops:       h(act(lib, 10, 0), act(lib, 30, 100), act(lib, 10, 150), act(lib, 20, 200)),
			want:      map[string]ElectionCounts{"library": {Actions: 4, Stale: 2, MaxStaleness: 100 * ms}},
			anomalies: []string{"token 10 acted 1 times", "token 20 acted 1 times"},
		},
		{
			name: "naive stale actions are counted, not anomalies",
			ops:  h(act(naive, 10, 0), act(naive, 20, 100), act(naive, 10, 300), act(lib, 5, 400)),
			want: map[string]ElectionCounts{"naive": {Actions: 3, Stale: 1, MaxStaleness: 200 * ms}, "library": {Actions: 1}},
		},
		{
			name:      "a fenced write out of token order",
			ops:       h(fenced(lib, 10, 5, true), fenced(lib, 20, 8, true), fenced(lib, 10, 9, true), fenced(lib, 20, 12, true)),
			want:      map[string]ElectionCounts{"library": {OutOfOrder: 1}},
			anomalies: []string{"library: fenced write of token 10 committed at revision 9, after one of token 20 at 8"},
		},
		{
			name: "refused and indeterminate writes do not count",
			ops: h(fenced(lib, 20, 8, true), fenced(lib, 10, 9, false),
				history.Op{Kind: history.KindFencedPut, Key: lib, Token: 10, Result: history.Unknown}),
			want: map[string]ElectionCounts{"library": {}},
		},
		{
			name: "naive out-of-order writes are counted",
			ops:  h(fenced(naive, 20, 8, true), fenced(naive, 10, 9, true)),
			want: map[string]ElectionCounts{"naive": {OutOfOrder: 1}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, counts := Election(tc.ops, modes)
			for name, want := range tc.want {
				got := counts[name]
				if got.Actions != want.Actions || got.Stale != want.Stale || got.MaxStaleness != want.MaxStaleness || got.OutOfOrder != want.OutOfOrder {
					t.Errorf("%s: got %+v, want %+v", name, got, want)
				}
			}
			if len(r.Anomalies) != len(tc.anomalies) {
				t.Fatalf("anomalies:\n%s\nwant %d", anomalies(r), len(tc.anomalies))
			}
			for i, a := range r.Anomalies {
				if !strings.Contains(a.What, tc.anomalies[i]) {
					t.Errorf("anomaly %d: %q, want %q in it", i, a.What, tc.anomalies[i])
				}
			}
		})
	}
}

func TestElectionHeadline(t *testing.T) {
	ops := h(act("n", 1, 0), act("n", 2, 10), act("n", 1, 40))
	r, _ := Election(ops, []ElectionMode{{Name: "library", Prefix: "l", Strict: true}, {Name: "naive", Prefix: "n"}})
	want := "election: library stale=0 max-staleness=0s out-of-order=0; naive stale=1 max-staleness=30ms out-of-order=0"
	if r.Headline != want {
		t.Fatalf("headline %q, want %q", r.Headline, want)
	}
	if !r.Valid() {
		t.Fatalf("naive counts made the result invalid: %v", r.Anomalies)
	}
}

// TestElectionClosestHandover: how near a run came to a stale action is
// the shortest time from a token's last action to its successor's first.
func TestElectionClosestHandover(t *testing.T) {
	const lib = "jlelect/library"
	modes := []ElectionMode{{Name: "library", Prefix: lib, Strict: true}}
	for _, tc := range []struct {
		name               string
		ops                []history.Op
		closest, handovers int64
	}{
		{"two handovers", h(act(lib, 10, 0), act(lib, 10, 5), act(lib, 20, 6), act(lib, 20, 11), act(lib, 30, 40)), 1 * ms, 2},
		{"stale is negative", h(act(lib, 10, 0), act(lib, 20, 100), act(lib, 10, 2600)), -2500 * ms, 1},
		{"no handover", h(act(lib, 10, 0), act(lib, 10, 5)), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, counts := Election(tc.ops, modes)
			if got := counts["library"]; got.Closest != tc.closest || int64(got.Handovers) != tc.handovers {
				t.Errorf("closest %v of %d handovers, want %v of %d", got.Closest, got.Handovers, tc.closest, tc.handovers)
			}
		})
	}
}

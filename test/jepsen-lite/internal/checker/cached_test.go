package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// cget is a read through the cache by process p.
func cget(p int, key, v string, start, end, rev int64, hit bool) history.Op {
	op := get(p, key, v, start, end, rev)
	op.Detail = history.DetailCacheMiss
	if hit {
		op.Detail = history.DetailCacheHit
	}
	return op
}

// pauseReader is a pause-reader fault that stopped process p.
func pauseReader(p int, start, end int64) history.Op {
	return history.Op{Process: p, Member: -1, Kind: history.KindFault, Start: start * ms, End: end * ms,
		Detail: "pause-reader: SIGSTOP reader-1#1 for a while"}
}

func readerExit(p int, s history.CacheStats) history.Op {
	return history.Op{Process: p, Member: -1, Kind: history.KindReaderExit, Key: "jl/cache/", Cache: &s}
}

func TestCachedReads(t *testing.T) {
	const k, k2 = "jl/cache/k0001", "jl/cache/k0002"
	// Every history ends with a reader that made a hit, unless a case
	// says otherwise: without one the checker cannot decide.
	exit := readerExit(9, history.CacheStats{Hits: 1})
	for _, tc := range []struct {
		name      string
		ops       []history.Op
		noExit    bool
		want      CacheCounts // only the fields compared below
		unknown   bool
		anomalies []string // parts of the anomalies, in order
	}{
		{
			name: "hits between writes",
			ops: h(put(5, k, "1", 0, 10, 2), cget(1, k, "1", 20, 21, 2, false), cget(1, k, "1", 30, 31, 2, true),
				put(5, k, "2", 40, 50, 3), cget(1, k, "2", 60, 61, 3, false), cget(1, k, "2", 70, 71, 3, true)),
			want: CacheCounts{Reads: 4, OK: 4},
		},
		{
			name: "a hit after a write completed is stale",
			ops: h(put(5, k, "1", 0, 10, 2), cget(1, k, "1", 20, 21, 2, false), put(5, k, "2", 40, 50, 3),
				cget(1, k, "1", 60, 61, 2, true)),
			want:      CacheCounts{Reads: 2, OK: 2, Linearizable: 1},
			anomalies: []string{"history of jl/cache/k0001 is not linearizable"},
		},
		{
			name: "a hit concurrent with the write may see either",
			ops: h(put(5, k, "1", 0, 10, 2), cget(1, k, "1", 20, 21, 2, false), put(5, k, "2", 40, 500, 3),
				cget(1, k, "1", 60, 61, 2, true), cget(2, k, "2", 70, 80, 3, false)),
			want: CacheCounts{Reads: 3, OK: 3},
		},
		{
			name: "failed reads have no effect",
			ops: h(put(5, k, "1", 0, 10, 2), put(5, k, "2", 40, 50, 3),
				history.Op{Process: 1, Kind: history.KindGet, Key: k, Value: "", Start: 60 * ms, End: 2060 * ms, Result: history.Fail, Detail: history.DetailCacheMiss}),
			want: CacheCounts{Reads: 1, OK: 0},
			// And no read through the cache answered: undecided.
			unknown: true,
		},
		{
			name: "a hit right after a pause past the lease",
			// The value did not change, so the history is linearizable;
			// the entry's lease had run out all the same.
			ops: h(put(5, k, "1", 0, 10, 2), cget(1, k, "1", 20, 21, 2, false), cget(1, k, "1", 30, 31, 2, true),
				pauseReader(1, 100, 2100), cget(1, k, "1", 2200, 2201, 2, true)),
			want:      CacheCounts{Reads: 3, OK: 3, Pauses: 1, AfterPause: 1, StaleHits: 1},
			anomalies: []string{"reader process 1 answered jl/cache/k0001 from its cache 100ms after a pause of 2s"},
		},
		{
			name: "the first read of each key after the pause misses",
			ops: h(put(5, k, "1", 0, 10, 2), cget(1, k, "1", 20, 21, 2, false), cget(1, k2, "", 22, 23, 0, false),
				pauseReader(1, 100, 2100), cget(1, k, "1", 2200, 2201, 2, false), cget(1, k, "1", 2210, 2211, 2, true),
				cget(1, k2, "", 2220, 2221, 0, true)),
			want:      CacheCounts{Reads: 5, OK: 5, Pauses: 1, AfterPause: 2, StaleHits: 1},
			anomalies: []string{"reader process 1 answered jl/cache/k0002 from its cache 120ms after"},
		},
		{
			name: "a hit in progress across the pause read the clock before it",
			ops:  h(cget(1, k, "", 20, 21, 0, false), pauseReader(1, 100, 2100), cget(1, k, "", 90, 2150, 0, true)),
			want: CacheCounts{Reads: 2, OK: 2, Pauses: 1},
		},
		{
			name: "a miss in progress across the pause may store a fresh entry",
			ops: h(cget(1, k, "", 20, 21, 0, false), pauseReader(1, 100, 2100), cget(1, k, "", 90, 2150, 0, false),
				cget(1, k, "", 2200, 2201, 0, true)),
			want: CacheCounts{Reads: 3, OK: 3, Pauses: 1},
		},
		{
			name: "a failed miss after the pause may still store an entry",
			ops: h(cget(1, k, "", 20, 21, 0, false), pauseReader(1, 100, 2100),
				history.Op{Process: 1, Kind: history.KindGet, Key: k, Start: 2200 * ms, End: 4200 * ms, Result: history.Fail, Detail: history.DetailCacheMiss},
				cget(1, k, "", 4300, 4301, 0, true)),
			want: CacheCounts{Reads: 3, OK: 2, Pauses: 1, AfterPause: 1},
		},
		{
			name: "a pause within the lease is not judged",
			ops:  h(cget(1, k, "", 20, 21, 0, false), pauseReader(1, 100, 1200), cget(1, k, "", 1300, 1301, 0, true)),
			want: CacheCounts{Reads: 2, OK: 2},
		},
		{
			name: "other readers keep their entries",
			ops:  h(cget(2, k, "", 20, 21, 0, false), pauseReader(1, 100, 2100), cget(2, k, "", 2200, 2201, 0, true)),
			want: CacheCounts{Reads: 2, OK: 2, Pauses: 1},
		},
		{
			name: "a pause that stopped nobody is not judged",
			ops:  h(cget(1, k, "", 20, 21, 0, false), pauseReader(-1, 100, 2100), cget(1, k, "", 2200, 2201, 0, true)),
			want: CacheCounts{Reads: 2, OK: 2},
		},
		{
			name: "KV reads of the keys are checked, not counted",
			ops:  h(put(5, k, "1", 0, 10, 2), get(5, k, "1", 20, 30, 2), get(5, k, "", 40, 50, 0)),
			want: CacheCounts{Linearizable: 1},
			// No read through the cache: undecided, besides the anomaly.
			unknown:   true,
			anomalies: []string{"not linearizable"},
		},
		{
			name:    "no hit at all leaves the cache untested",
			ops:     h(cget(1, k, "", 20, 21, 0, false)),
			noExit:  true,
			want:    CacheCounts{Reads: 1, OK: 1},
			unknown: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := tc.ops
			if !tc.noExit {
				ops = append(ops, exit)
			}
			r, got := CachedReads(ops, CacheConfig{Prefix: "jl/cache/", ReadLease: time.Second, PauseSlack: 250 * time.Millisecond,
				Budget: 10 * time.Second, OutDir: t.TempDir()})
			w := tc.want
			if got.Reads != w.Reads || got.OK != w.OK || got.Pauses != w.Pauses || got.AfterPause != w.AfterPause ||
				got.StaleHits != w.StaleHits || got.Linearizable != w.Linearizable {
				t.Errorf("got %+v, want %+v", got, w)
			}
			if r.Unknown != tc.unknown {
				t.Errorf("unknown=%v, want %v: %v", r.Unknown, tc.unknown, r.Stats)
			}
			if len(r.Anomalies) != len(tc.anomalies) {
				t.Fatalf("anomalies:\n%s\nwant %d", anomalies(r), len(tc.anomalies))
			}
			for i, a := range r.Anomalies {
				if a.Checker != "cached-reads" || !strings.Contains(a.What, tc.anomalies[i]) {
					t.Errorf("anomaly %d: [%s] %q, want [cached-reads] and %q in it", i, a.Checker, a.What, tc.anomalies[i])
				}
			}
		})
	}
}

func TestCachedReadsStatsAndHeadline(t *testing.T) {
	const k = "jl/cache/k0001"
	ops := h(cget(1, k, "", 0, 1, 0, false), cget(1, k, "", 2, 3, 0, true), cget(2, k, "", 4, 5, 0, false),
		readerExit(1, history.CacheStats{Hits: 7, Misses: 3, Uncached: 1, Invalidations: 4, Reconnects: 1}),
		readerExit(2, history.CacheStats{Hits: 5, Misses: 2, Invalidations: 1, Evictions: 2}))
	r, c := CachedReads(ops, CacheConfig{Prefix: "jl/cache/", ReadLease: time.Second, Budget: 10 * time.Second, OutDir: t.TempDir()})
	if !r.Valid() {
		t.Fatalf("invalid: %v %v", r.Anomalies, r.Stats)
	}
	want := history.CacheStats{Hits: 12, Misses: 5, Uncached: 1, Invalidations: 5, Evictions: 2, Reconnects: 1}
	if c.Stats != want {
		t.Fatalf("stats %+v, want %+v", c.Stats, want)
	}
	const headline = "cached-reads: reads=3 hits=12 misses=5 uncached=1 invalidations=5 reconnects=1 pauses=0 stale-after-pause=0 anomalies=0"
	if r.Headline != headline {
		t.Fatalf("headline %q, want %q", r.Headline, headline)
	}
}

package checker

import (
	"fmt"
	"strings"
	"time"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// CacheConfig says where the cached-read workload's registers are and how
// long the members' read lease was.
type CacheConfig struct {
	Prefix string
	// ReadLease is the members' --read-lease-duration: a reader paused at
	// least ReadLease+PauseSlack holds no entry it could serve when it
	// wakes.
	ReadLease  time.Duration
	PauseSlack time.Duration
	Budget     time.Duration // of the linearizability search
	OutDir     string
}

// CacheCounts is what the checker found.
type CacheCounts struct {
	// Reads through the cache, and how many returned a value.
	Reads, OK int
	// Summed over every reader process, from the counters (cache.Stats)
	// each last reported.
	Stats history.CacheStats
	// Pauses: readers stopped for longer than the lease; AfterPause: their
	// reads that began after they woke, until their first miss of the key
	// (these must all be misses); StaleHits: hits among them.
	Pauses, AfterPause, StaleHits int
	// Linearizable: anomalies of the linearizability check.
	Linearizable int
}

// Summary is the counts on one line.
func (c CacheCounts) Summary() string {
	return fmt.Sprintf("reads=%d hits=%d misses=%d uncached=%d invalidations=%d reconnects=%d pauses=%d stale-after-pause=%d",
		c.Reads, c.Stats.Hits, c.Stats.Misses, c.Stats.Uncached, c.Stats.Invalidations, c.Stats.Reconnects, c.Pauses, c.StaleHits)
}

// CachedReads judges the cached-read workload. Its registers, read
// through client/cache and written (and now and then read) through the KV
// API, must be linearizable: a hit answers from memory, but at an instant
// within the Get, so it is checked like any read. And a reader stopped for
// longer than the read lease must not answer a hit, after it wakes, from
// an entry it held before: each lease ran out while it was stopped, so
// each key's first read after it wakes must go to the leader. That holds
// whether or not the key changed meanwhile, so the pause-reader fault is
// judged even when no write happened to race it. The reader's reads are
// timed in its own process, before Get and after it returned.
func CachedReads(ops []history.Op, cfg CacheConfig) (Result, CacheCounts) {
	var c CacheCounts
	lin := Linearizable(ops, cfg.Prefix, cfg.Budget, cfg.OutDir)
	r := Result{Name: "cached-reads", Unknown: lin.Unknown, Stats: lin.Stats, Details: lin.Details}
	for _, a := range lin.Anomalies {
		a.Checker = r.Name
		r.Anomalies = append(r.Anomalies, a)
	}
	c.Linearizable = len(lin.Anomalies)

	// Reads through the cache, by process, in the order each made them.
	byProc := map[int][]history.Op{}
	for _, op := range ops {
		switch {
		case op.Kind == history.KindReaderExit && op.Cache != nil:
			c.Stats.Add(*op.Cache)
		case isCacheRead(op, cfg.Prefix):
			c.Reads++
			if op.Result == history.OK {
				c.OK++
			}
			byProc[op.Process] = append(byProc[op.Process], op)
		}
	}
	for _, f := range FaultsOf(ops) {
		if !strings.HasPrefix(f.Detail, "pause-reader:") || f.Process <= 0 || f.Result != history.OK ||
			f.End-f.Start < int64(cfg.ReadLease+cfg.PauseSlack) {
			continue
		}
		c.Pauses++
		afterPause(&r, &c, f, byProc[f.Process])
	}
	r.stat("%d reads through the cache (%d answered); hits %d, misses %d, uncached %d, invalidations %d, evictions %d, reconnects %d (the readers' counters)",
		c.Reads, c.OK, c.Stats.Hits, c.Stats.Misses, c.Stats.Uncached, c.Stats.Invalidations, c.Stats.Evictions, c.Stats.Reconnects)
	r.stat("%d readers paused past the %v lease; %d reads right after they woke, %d of them hits on entries from before",
		c.Pauses, cfg.ReadLease, c.AfterPause, c.StaleHits)
	if c.OK == 0 || c.Stats.Hits == 0 {
		// Nothing to judge: the run must not pass on it.
		r.Unknown = true
		r.stat("the workload made no successful read through the cache or no cache hit: the cache went untested")
	}
	r.Headline = fmt.Sprintf("cached-reads: %s anomalies=%d", c.Summary(), len(r.Anomalies))
	return r, c
}

func isCacheRead(op history.Op, prefix string) bool {
	return op.Kind == history.KindGet && strings.HasPrefix(op.Key, prefix) &&
		(op.Detail == history.DetailCacheHit || op.Detail == history.DetailCacheMiss)
}

// afterPause checks the reads of the reader that fault f stopped. Key by
// key, the reads that completed after the pause began are looked at in
// order until the first miss (which may have stored a fresh entry): a hit
// that began after the fault ended (after SIGCONT) came from an entry
// stored before the pause, whose lease had run out. Reads in progress
// across the pause may be hits: they read the clock before it.
func afterPause(r *Result, c *CacheCounts, f history.Op, reads []history.Op) {
	done := map[string]bool{} // keys whose scan ended at a miss
	for _, op := range reads {
		if op.End < f.Start || done[op.Key] {
			continue
		}
		if op.Detail == history.DetailCacheMiss {
			if op.Start > f.End {
				c.AfterPause++
			}
			done[op.Key] = true
			continue
		}
		if op.Start <= f.End {
			continue // began before the fault was over: it may have checked its deadline before the pause
		}
		c.AfterPause++
		c.StaleHits++
		r.add(fmt.Sprintf("reader process %d answered %s from its cache %s after a pause of %s that outlasted the read lease, without asking the leader first",
			f.Process, op.Key, history.Dur(op.Start-f.End), history.Dur(f.End-f.Start)), f, op)
		done[op.Key] = true
	}
}

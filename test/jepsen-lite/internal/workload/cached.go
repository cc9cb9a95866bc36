package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/corenode/corenode/internal/rateclock"
	"github.com/corenode/corenode/test/jepsen-lite/internal/cachereader"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// CachePrefix is where the cached-read workload's registers live: under
// Prefix, so that the watch checker accounts for its writes too.
const CachePrefix = Prefix + "cache/"

// cacheKeyPrefix names the keys. The linearizability checker names its
// files after a key without its prefix; the "k" keeps them apart from the
// register workload's.
const cacheKeyPrefix = CachePrefix + "k"

// CachedConfig shapes the cached-read workload.
type CachedConfig struct {
	// Exe is the jepsen-lite binary, re-executed as cachereader.Command.
	Exe       string
	Endpoints []string
	Readers   int // reader processes
	Keys      int // keys in use at once
	Seed      uint64
	// ReadEvery and WriteEvery bound the random time between one reader's
	// (one writer's) operations.
	ReadEvery  time.Duration
	WriteEvery time.Duration
	LogDir     string
	// RestartAfter is the time between a reader's exit and the start of
	// its replacement.
	RestartAfter time.Duration
	// ClockDir, if set, holds a rate file per reader slot (SLOT.rate, at 1
	// from Start): its caches judge their leases on a clock at that rate
	// (ClockFiles).
	ClockDir string
}

// Cached is the cached-read workload: reader processes, each with its own
// client and client/cache Cache, read a few register keys through the
// cache, while writer goroutines (RunWriter) put unique values to the same
// keys, and now and then read them, through the KV API. Every read
// through the cache, hit or miss, is recorded as a register read (a
// KindGet with DetailCacheHit or DetailCacheMiss), timed in the reader
// process, so the linearizability checker judges the cache like any read.
// Whenever a reader exits another takes its slot.
//
// Readers are processes so that PauseOne can SIGSTOP one for longer than
// the read lease. Methods are safe for concurrent use.
type Cached struct {
	// children runs the readers; Stop ends them by closing their stdin
	// (runOnce, on stop), so no signal.
	children
	env   *Env
	cfg   CachedConfig
	pool  *keyPool
	slots []*readerSlot
}

// readerSlot is one reader position: one process at a time.
type readerSlot struct {
	child
	name      string
	endpoints []string
	member    int    // the member its client is pinned to; -1: every member
	clock     string // its rate file, or ""
	process   int    // guarded by Cached.mu
}

// NewCached makes the workload; Start starts its readers, RunWriter runs a
// writer.
func NewCached(e *Env, cfg CachedConfig) *Cached {
	// Keys retire after fewer indeterminate writes than the register
	// workload's: reads are many here, and each indeterminate write stays
	// concurrent with every later read of its key in the search.
	c := &Cached{children: newChildren(0), env: e, cfg: cfg, pool: newKeyPool(cacheKeyPrefix, cfg.Keys, 600, 4)}
	n := len(cfg.Endpoints)
	for i := range cfg.Readers {
		// Every (n+1)th reader uses every member; the others are pinned
		// to one, so that followers relay sessions to the leader.
		s := &readerSlot{name: fmt.Sprintf("reader-%d", i+1), endpoints: cfg.Endpoints, member: -1}
		if k := i % (n + 1); k > 0 {
			s.endpoints, s.member = []string{cfg.Endpoints[k-1]}, k-1
		}
		if cfg.ClockDir != "" {
			s.clock = filepath.Join(cfg.ClockDir, s.name+".rate")
		}
		c.slots = append(c.slots, s)
		c.add(&s.child)
	}
	return c
}

// Start starts every reader; they run until Stop.
func (c *Cached) Start() error {
	for _, s := range c.slots {
		if err := s.openLog(filepath.Join(c.cfg.LogDir, s.name+".log")); err != nil {
			return err
		}
		if s.clock != "" {
			if err := rateclock.WriteRate(s.clock, 1); err != nil {
				return fmt.Errorf("cached-read workload: clock of %s: %w", s.name, err)
			}
		}
	}
	for _, s := range c.slots {
		c.keep(c.cfg.RestartAfter, func(n int) { c.runOnce(s, n) })
	}
	return nil
}

// ClockFiles are the readers' rate files, by slot name: the clock-rate
// fault writes them.
func (c *Cached) ClockFiles() map[string]string {
	out := map[string]string{}
	for _, s := range c.slots {
		if s.clock != "" {
			out[s.name] = s.clock
		}
	}
	return out
}

// runOnce runs one reader process until Stop or its end, asking it for one
// read after another and recording them.
func (c *Cached) runOnce(s *readerSlot, n int) {
	e := c.env
	process := e.NewProcess()
	rcfg := cachereader.Config{Endpoints: s.endpoints, Name: fmt.Sprintf("%s#%d", s.name, n), Timeout: e.OpTimeout, ClockFile: s.clock}
	cmd := exec.Command(c.cfg.Exe, append([]string{cachereader.Command}, rcfg.Args()...)...)
	stdin, err := cmd.StdinPipe()
	var stdout io.ReadCloser
	if err == nil {
		stdout, err = cmd.StdoutPipe()
	}
	if err == nil {
		c.mu.Lock()
		s.process = process // read only while s.cmd is set
		c.mu.Unlock()
		err = c.start(&s.child, cmd, rcfg.Name, process)
	}
	if errors.Is(err, errStopping) {
		return
	}
	if err != nil {
		e.Log.Error("start a cache reader", "reader", rcfg.Name, "err", err)
		return
	}

	rng := newRand(c.cfg.Seed, process)
	enc, dec := json.NewEncoder(stdin), json.NewDecoder(stdout)
	var last history.CacheStats
	why := ""
	for why == "" {
		select {
		case <-c.stop:
			why = "stopped"
			continue
		default:
		}
		k := c.pool.pick(rng)
		var res cachereader.Result
		if err := enc.Encode(cachereader.Request{Key: k.name}); err != nil {
			why = fmt.Sprintf("send a request: %v", err)
			continue
		}
		if err := dec.Decode(&res); err != nil {
			why = fmt.Sprintf("read a result: %v", err)
			continue
		}
		if res.Key != k.name {
			why = fmt.Sprintf("asked to read %s, it answered for %s", k.name, res.Key)
			continue
		}
		op := ReaderOp(e.Clock, process, s.member, res)
		c.pool.done(k, op.Result)
		e.Rec.Add(op)
		last = res.Stats
		if !c.pause(rng, c.cfg.ReadEvery) {
			why = "stopped"
		}
	}
	// Closing stdin ends the reader; keep reading its stdout, or one
	// blocked on a full pipe never exits.
	stdin.Close()
	_, _ = io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	c.mu.Lock()
	c.exitedLocked(&s.child)
	c.mu.Unlock()
	detail := "exit status 0"
	if werr != nil {
		detail = werr.Error()
	}
	now := e.Clock.Now()
	e.Rec.Add(history.Op{Process: process, Member: s.member, Kind: history.KindReaderExit, Key: CachePrefix,
		Start: now, End: now, Result: history.OK, Detail: fmt.Sprintf("%s: %s (%s)", rcfg.Name, detail, why), Cache: &last})
}

// ReaderOp is the history record of one read through the cache: a
// register read, timed by the reader process's CLOCK_MONOTONIC readings
// around its Get. A read that erred has no effect and is a failure.
func ReaderOp(clock *history.Clock, process, member int, res cachereader.Result) history.Op {
	op := history.Op{Process: process, Member: member, Kind: history.KindGet, Key: res.Key,
		Start: clock.FromMono(res.Start), End: clock.FromMono(res.End), Detail: history.DetailCacheMiss}
	if res.Hit {
		op.Detail = history.DetailCacheHit
	}
	if res.Err != "" {
		op.Result, op.Error = history.Fail, res.Err
		return op
	}
	op.Result = history.OK
	if res.Found {
		op.Value, op.Rev = res.Value, res.Rev
	}
	return op
}

// pause waits a random time below limit, or until Stop; false on Stop.
func (c *Cached) pause(rng *rand.Rand, limit time.Duration) bool {
	d := time.Duration(0)
	if limit > 0 {
		d = time.Duration(rng.Int64N(int64(limit)))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.stop:
		return false
	case <-t.C:
		return true
	}
}

// RunWriter is one writer until ctx is done: puts of unique values to the
// workload's keys and, one time in five, a linearizable read of one,
// through the KV API (pinned to one member or not, as the register
// clients).
func (c *Cached) RunWriter(ctx context.Context) {
	e := c.env
	process := e.NewProcess()
	cli, member := e.client(process)
	rng := newRand(c.cfg.Seed, process)
	reg := &Register{env: e, pool: c.pool}
	for ctx.Err() == nil {
		k := c.pool.pick(rng)
		op := history.Op{Process: process, Member: member, Key: k.name, Kind: history.KindPut}
		if rng.IntN(5) == 0 {
			op.Kind = history.KindGet
		}
		reg.do(ctx, cli, &op, seen{})
		c.pool.done(k, op.Result)
		e.Rec.Add(op)
		if !sleep(ctx, time.Duration(rng.Int64N(int64(max(c.cfg.WriteEvery, 1))))) {
			return
		}
	}
}

// PauseOne SIGSTOPs one running reader, the pick-th (modulo) of those
// running, and says which, with its history process number; it stops
// none (and returns 0) when none runs. ResumeAll undoes it.
func (c *Cached) PauseOne(ctx context.Context, pick int) (string, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var running []*readerSlot
	for _, s := range c.slots {
		if s.cmd != nil {
			running = append(running, s)
		}
	}
	if len(running) == 0 || c.stopping {
		return "", 0, nil
	}
	s := running[pick%len(running)]
	if err := c.pauseLocked(&s.child); err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("%s (process %d)", s.running, s.process), s.process, nil
}

package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

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
	env   *Env
	cfg   CachedConfig
	pool  *keyPool
	slots []*readerSlot

	stop chan struct{} // closed by Stop and KillNow

	mu       sync.Mutex
	stopping bool
	paused   []*readerSlot
	wg       sync.WaitGroup
}

// readerSlot is one reader position: one process at a time.
type readerSlot struct {
	name      string
	endpoints []string
	member    int // the member its client is pinned to; -1: every member
	log       *os.File

	// guarded by Cached.mu
	cmd     *exec.Cmd
	process int
	running string // name of the incarnation running
}

// NewCached makes the workload; Start starts its readers, RunWriter runs a
// writer.
func NewCached(e *Env, cfg CachedConfig) *Cached {
	// Keys retire after fewer indeterminate writes than the register
	// workload's: reads are many here, and each indeterminate write stays
	// concurrent with every later read of its key in the search.
	c := &Cached{env: e, cfg: cfg, pool: newKeyPool(cacheKeyPrefix, cfg.Keys, 600, 4), stop: make(chan struct{})}
	n := len(cfg.Endpoints)
	for i := range cfg.Readers {
		// Every (n+1)th reader uses every member; the others are pinned
		// to one, so that followers relay sessions to the leader.
		s := &readerSlot{name: fmt.Sprintf("reader-%d", i+1), endpoints: cfg.Endpoints, member: -1}
		if k := i % (n + 1); k > 0 {
			s.endpoints, s.member = []string{cfg.Endpoints[k-1]}, k-1
		}
		c.slots = append(c.slots, s)
	}
	return c
}

// Start starts every reader; they run until Stop.
func (c *Cached) Start() error {
	for _, s := range c.slots {
		f, err := os.OpenFile(filepath.Join(c.cfg.LogDir, s.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("workload: reader log: %w", err)
		}
		s.log = f
	}
	for _, s := range c.slots {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.keep(s)
		}()
	}
	return nil
}

// keep runs one reader after another in slot s until Stop.
func (c *Cached) keep(s *readerSlot) {
	for n := 1; ; n++ {
		c.runOnce(s, n)
		select {
		case <-c.stop:
			return
		case <-time.After(c.cfg.RestartAfter):
		}
	}
}

// runOnce runs one reader process until Stop or its end, asking it for one
// read after another and recording them.
func (c *Cached) runOnce(s *readerSlot, n int) {
	e := c.env
	process := e.NewProcess()
	rcfg := cachereader.Config{Endpoints: s.endpoints, Name: fmt.Sprintf("%s#%d", s.name, n), Timeout: e.OpTimeout}
	cmd := exec.Command(c.cfg.Exe, append([]string{cachereader.Command}, rcfg.Args()...)...)
	cmd.Stderr = s.log
	// Its own process group, as the members: a Ctrl-C meant for
	// jepsen-lite must not reach it first; Pdeathsig so it dies with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	var stdout io.ReadCloser
	if err == nil {
		stdout, err = cmd.StdoutPipe()
	}
	if err == nil {
		fmt.Fprintf(s.log, "=== %s jepsen-lite: start %s (process %d)\n", time.Now().Format(time.RFC3339Nano), rcfg.Name, process)
		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			return
		}
		err = cmd.Start()
		if err == nil {
			s.cmd, s.process, s.running = cmd, process, rcfg.Name
		}
		c.mu.Unlock()
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
	s.cmd, s.process, s.running = nil, 0, ""
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
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		return "", 0, fmt.Errorf("SIGSTOP %s: %w", s.running, err)
	}
	fmt.Fprintf(s.log, "=== %s jepsen-lite: SIGSTOP\n", time.Now().Format(time.RFC3339Nano))
	c.paused = append(c.paused, s)
	return fmt.Sprintf("%s (process %d)", s.running, s.process), s.process, nil
}

// ResumeAll SIGCONTs every reader PauseOne stopped.
func (c *Cached) ResumeAll(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resumeLocked()
}

func (c *Cached) resumeLocked() error {
	var errs []error
	for _, s := range c.paused {
		// A stopped process cannot exit, so its cmd is still the one
		// that was stopped (only SIGKILL ends it, and Stop resumes first).
		if s.cmd == nil {
			continue
		}
		if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			errs = append(errs, fmt.Errorf("SIGCONT %s: %w", s.running, err))
		}
		fmt.Fprintf(s.log, "=== %s jepsen-lite: SIGCONT\n", time.Now().Format(time.RFC3339Nano))
	}
	c.paused = nil
	return errors.Join(errs...)
}

// Stop ends every reader (its stdin closed after its current read; SIGKILL
// after grace) and waits for them. No reader starts after Stop.
func (c *Cached) Stop(grace time.Duration) {
	c.mu.Lock()
	c.stopLocked()
	_ = c.resumeLocked()
	c.mu.Unlock()
	all := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(all)
	}()
	select {
	case <-all:
	case <-time.After(grace):
		c.KillNow()
		<-all
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.slots {
		if s.log != nil {
			s.log.Close()
			s.log = nil // a second Stop (the run's deferred one) finds nothing to do
		}
	}
}

func (c *Cached) stopLocked() {
	if !c.stopping {
		c.stopping = true
		close(c.stop)
	}
}

// KillNow SIGKILLs every reader without waiting: the last resort of a hard
// deadline.
func (c *Cached) KillNow() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked()
	for _, s := range c.slots {
		if s.cmd != nil {
			_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

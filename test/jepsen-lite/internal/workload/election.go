package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
	holderproc "github.com/corenode/corenode/test/jepsen-lite/internal/holder"
)

// ElectionPrefix is where the election workload keeps its keys: outside
// Prefix, so that the watch checker does not see writes it cannot place.
const ElectionPrefix = "jlelect/"

// ElectionKey is the election prefix of a mode ("naive", "library"); the
// election keys are ElectionKey(mode) + "/" + lease ID, as in
// concurrency.Election.
func ElectionKey(mode string) string { return ElectionPrefix + mode }

// RegisterKey is the key a mode's holders write with their fenced writes.
func RegisterKey(mode string) string { return ElectionPrefix + "register/" + mode }

// ElectionConfig shapes the election workload.
type ElectionConfig struct {
	// Exe is the jepsen-lite binary, re-executed as holderproc.Command.
	Exe       string
	Endpoints []string
	Modes     []string
	Holders   int // per mode
	TTL       time.Duration
	ActEvery  time.Duration
	// WriteEvery spaces the fenced writes; they are round trips, and
	// the other workloads share the cluster.
	WriteEvery time.Duration
	LogDir     string
	// RestartAfter is the time between a holder's exit and the start of
	// its replacement.
	RestartAfter time.Duration
}

// Election runs Holders holder processes per mode, each campaigning on its
// mode's prefix; whenever one exits (it lost leadership, could not reach
// the cluster, was killed) another takes its slot, so that every election
// keeps going through every fault. Their events go into the history.
//
// Methods are safe for concurrent use.
type Election struct {
	env   *Env
	cfg   ElectionConfig
	slots []*slot

	stop chan struct{} // closed by Stop and KillNow

	mu       sync.Mutex
	stopping bool
	// changed is closed and replaced whenever a slot starts or stops
	// leading, for PauseLeaders to wait on.
	changed chan struct{}
	paused  []*slot
	wg      sync.WaitGroup
}

// slot is one holder position: one process at a time.
type slot struct {
	mode string
	name string // holder name; each incarnation's campaign value adds a number
	log  *os.File

	// guarded by Election.mu
	cmd     *exec.Cmd
	leading bool
	token   int64
}

// NewElection makes the workload; Start starts it.
func NewElection(e *Env, cfg ElectionConfig) *Election {
	el := &Election{env: e, cfg: cfg, changed: make(chan struct{}), stop: make(chan struct{})}
	for _, m := range cfg.Modes {
		for i := range cfg.Holders {
			el.slots = append(el.slots, &slot{mode: m, name: fmt.Sprintf("%s-%d", m, i+1)})
		}
	}
	return el
}

// Start starts every holder; they run until Stop.
func (el *Election) Start() error {
	for _, s := range el.slots {
		f, err := os.OpenFile(filepath.Join(el.cfg.LogDir, "holder-"+s.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("workload: holder log: %w", err)
		}
		s.log = f
	}
	for _, s := range el.slots {
		el.wg.Add(1)
		go func() {
			defer el.wg.Done()
			el.keep(s)
		}()
	}
	return nil
}

// keep runs one holder after another in slot s until Stop.
func (el *Election) keep(s *slot) {
	for n := 1; ; n++ {
		el.runOnce(s, n)
		select {
		case <-el.stop:
			return
		case <-time.After(el.cfg.RestartAfter):
		}
	}
}

// runOnce runs one holder process to its end, recording its events.
func (el *Election) runOnce(s *slot, n int) {
	e := el.env
	process := e.NewProcess()
	cfg := holderproc.Config{
		Mode: s.mode, Endpoints: el.cfg.Endpoints, Prefix: ElectionKey(s.mode),
		Name: fmt.Sprintf("%s#%d", s.name, n), TTL: el.cfg.TTL,
		ActEvery: el.cfg.ActEvery, WriteEvery: el.cfg.WriteEvery, Register: RegisterKey(s.mode),
	}
	cmd := exec.Command(el.cfg.Exe, append([]string{holderproc.Command}, cfg.Args()...)...)
	cmd.Stderr = s.log
	// Its own process group, as the members: a Ctrl-C meant for
	// jepsen-lite must not reach it first; Pdeathsig so it dies with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		fmt.Fprintf(s.log, "=== %s jepsen-lite: start %s (process %d)\n", time.Now().Format(time.RFC3339Nano), cfg.Name, process)
		el.mu.Lock()
		if el.stopping {
			el.mu.Unlock()
			return
		}
		err = cmd.Start()
		if err == nil {
			s.cmd = cmd
		}
		el.mu.Unlock()
	}
	if err != nil {
		e.Log.Error("start a holder", "holder", cfg.Name, "err", err)
		return
	}
	prefix := ElectionKey(s.mode)
	rerr := holderproc.ReadEvents(stdout, func(ev holderproc.Event) {
		el.record(s, process, prefix, ev)
	})
	if rerr != nil {
		// Keep reading, or a holder blocked on a full pipe never exits.
		_, _ = io.Copy(io.Discard, stdout)
	}
	werr := cmd.Wait()
	el.mu.Lock()
	s.cmd = nil
	el.setLeading(s, false, 0)
	el.mu.Unlock()
	now := e.Clock.Now()
	detail := "exit status 0"
	if werr != nil {
		detail = werr.Error()
	}
	if rerr != nil {
		detail += "; " + rerr.Error()
	}
	e.Rec.Add(history.Op{Process: process, Member: -1, Kind: history.KindHolderExit, Key: prefix,
		Start: now, End: now, Result: history.OK, Detail: cfg.Name + ": " + detail})
}

func (el *Election) record(s *slot, process int, prefix string, ev holderproc.Event) {
	c := el.env.Clock
	op := history.Op{Process: process, Member: -1, Key: prefix, Token: ev.Token, Result: history.OK,
		Start: c.FromMono(ev.Mono), End: c.FromMono(ev.Mono)}
	switch ev.Ev {
	case holderproc.EvElected:
		op.Kind, op.End, op.Detail = history.KindElected, c.FromMono(ev.End), ev.Key
		el.mu.Lock()
		el.setLeading(s, true, ev.Token)
		el.mu.Unlock()
	case holderproc.EvAct:
		op.Kind = history.KindAct
	case holderproc.EvWrite:
		op.Kind, op.End, op.Swapped = history.KindFencedPut, c.FromMono(ev.End), ev.Committed
		if ev.Committed {
			op.Rev = ev.Rev
		}
		if ev.Err != "" {
			op.Result, op.Error = history.Unknown, ev.Err
		}
	case holderproc.EvLost:
		op.Kind, op.Detail = history.KindElectLost, ev.Err
		el.mu.Lock()
		el.setLeading(s, false, 0)
		el.mu.Unlock()
	default:
		el.env.Log.Error("holder: unknown event", "event", ev.Ev)
		return
	}
	el.env.Rec.Add(op)
}

// setLeading needs el.mu.
func (el *Election) setLeading(s *slot, leading bool, token int64) {
	if s.leading == leading && s.token == token {
		return
	}
	s.leading, s.token = leading, token
	close(el.changed)
	el.changed = make(chan struct{})
}

// PauseLeaders SIGSTOPs, in every mode, the holder that last said it was
// elected and has not said it lost, waiting up to wait for each mode to
// have one. It returns what it stopped; ResumeAll undoes it.
func (el *Election) PauseLeaders(ctx context.Context, wait time.Duration) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	el.mu.Lock()
	defer el.mu.Unlock()
	for wctx.Err() == nil && !el.allLeadLocked() {
		changed := el.changed
		el.mu.Unlock()
		select {
		case <-changed:
		case <-wctx.Done():
		}
		el.mu.Lock()
	}
	var done []string
	var errs []error
	for _, m := range el.cfg.Modes {
		s := el.leaderLocked(m)
		if s == nil {
			errs = append(errs, fmt.Errorf("no %s holder leads", m))
			continue
		}
		if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
			errs = append(errs, fmt.Errorf("SIGSTOP %s: %w", s.name, err))
			continue
		}
		fmt.Fprintf(s.log, "=== %s jepsen-lite: SIGSTOP\n", time.Now().Format(time.RFC3339Nano))
		el.paused = append(el.paused, s)
		done = append(done, fmt.Sprintf("%s (token %d)", s.name, s.token))
	}
	return strings.Join(done, ", "), errors.Join(errs...)
}

func (el *Election) allLeadLocked() bool {
	for _, m := range el.cfg.Modes {
		if el.leaderLocked(m) == nil {
			return false
		}
	}
	return true
}

func (el *Election) leaderLocked(mode string) *slot {
	for _, s := range el.slots {
		if s.mode == mode && s.leading && s.cmd != nil {
			return s
		}
	}
	return nil
}

// ResumeAll SIGCONTs every holder PauseLeaders stopped.
func (el *Election) ResumeAll(ctx context.Context) error {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.resumeLocked()
}

func (el *Election) resumeLocked() error {
	var errs []error
	for _, s := range el.paused {
		// A stopped process cannot exit, so its cmd is still the one
		// that was stopped (only SIGKILL ends it, and Stop resumes first).
		if s.cmd == nil {
			continue
		}
		if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			errs = append(errs, fmt.Errorf("SIGCONT %s: %w", s.name, err))
		}
		fmt.Fprintf(s.log, "=== %s jepsen-lite: SIGCONT\n", time.Now().Format(time.RFC3339Nano))
	}
	el.paused = nil
	return errors.Join(errs...)
}

// Stop ends every holder: SIGTERM (it resigns), SIGKILL after grace, and
// waits for them. No holder starts after Stop.
func (el *Election) Stop(grace time.Duration) {
	el.mu.Lock()
	el.stopLocked()
	_ = el.resumeLocked()
	for _, s := range el.slots {
		if s.cmd != nil {
			_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	el.mu.Unlock()
	all := make(chan struct{})
	go func() {
		el.wg.Wait()
		close(all)
	}()
	select {
	case <-all:
	case <-time.After(grace):
		el.KillNow()
		<-all
	}
	el.mu.Lock()
	defer el.mu.Unlock()
	for _, s := range el.slots {
		if s.log != nil {
			s.log.Close()
			s.log = nil // a second Stop (the run's deferred one) finds nothing to do
		}
	}
}

func (el *Election) stopLocked() {
	if !el.stopping {
		el.stopping = true
		close(el.stop)
	}
}

// KillNow SIGKILLs every holder without waiting: the last resort of a
// hard deadline.
func (el *Election) KillNow() {
	el.mu.Lock()
	defer el.mu.Unlock()
	el.stopLocked()
	for _, s := range el.slots {
		if s.cmd != nil {
			_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

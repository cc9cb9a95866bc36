package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/corenode/corenode/internal/rateclock"
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
	// ClockDir, if set, holds a rate file per library holder slot
	// (SLOT.rate, at 1 from Start): its holders measure their leases on a
	// clock at that rate (ClockFiles). Naive holders run at the real rate.
	ClockDir string
}

// Election runs Holders holder processes per mode, each campaigning on its
// mode's prefix; whenever one exits (it lost leadership, could not reach
// the cluster, was killed) another takes its slot, so that every election
// keeps going through every fault. Their events go into the history.
//
// Methods are safe for concurrent use.
type Election struct {
	// children runs the holders; Stop sends them SIGTERM, on which a
	// holder resigns.
	children
	env   *Env
	cfg   ElectionConfig
	slots []*slot

	// changed is closed and replaced whenever a slot starts or stops
	// leading, for PauseLeaders to wait on; guarded by mu.
	changed chan struct{}
}

// slot is one holder position: one process at a time.
type slot struct {
	child
	mode  string
	name  string // holder name; each incarnation's campaign value adds a number
	clock string // its rate file, or ""

	// guarded by Election.mu
	leading bool
	token   int64
}

// NewElection makes the workload; Start starts it.
func NewElection(e *Env, cfg ElectionConfig) *Election {
	el := &Election{children: newChildren(syscall.SIGTERM), env: e, cfg: cfg, changed: make(chan struct{})}
	for _, m := range cfg.Modes {
		for i := range cfg.Holders {
			s := &slot{mode: m, name: fmt.Sprintf("%s-%d", m, i+1)}
			if cfg.ClockDir != "" && m == holderproc.Library {
				s.clock = filepath.Join(cfg.ClockDir, "holder-"+s.name+".rate")
			}
			el.slots = append(el.slots, s)
			el.add(&s.child)
		}
	}
	return el
}

// Start starts every holder; they run until Stop.
func (el *Election) Start() error {
	for _, s := range el.slots {
		if err := s.openLog(filepath.Join(el.cfg.LogDir, "holder-"+s.name+".log")); err != nil {
			return err
		}
		if s.clock != "" {
			if err := rateclock.WriteRate(s.clock, 1); err != nil {
				return fmt.Errorf("election workload: clock of %s: %w", s.name, err)
			}
		}
	}
	for _, s := range el.slots {
		el.keep(el.cfg.RestartAfter, func(n int) { el.runOnce(s, n) })
	}
	return nil
}

// runOnce runs one holder process to its end, recording its events.
func (el *Election) runOnce(s *slot, n int) {
	e := el.env
	process := e.NewProcess()
	cfg := holderproc.Config{
		Mode: s.mode, Endpoints: el.cfg.Endpoints, Prefix: ElectionKey(s.mode),
		Name: fmt.Sprintf("%s#%d", s.name, n), TTL: el.cfg.TTL,
		ActEvery: el.cfg.ActEvery, WriteEvery: el.cfg.WriteEvery, Register: RegisterKey(s.mode),
		ClockFile: s.clock,
	}
	cmd := exec.Command(el.cfg.Exe, append([]string{holderproc.Command}, cfg.Args()...)...)
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = el.start(&s.child, cmd, cfg.Name, process)
	}
	if errors.Is(err, errStopping) {
		return
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
	el.exitedLocked(&s.child)
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

// ClockFiles are the holders' rate files, by slot name ("holder-" +
// slot): the clock-rate fault writes them.
func (el *Election) ClockFiles() map[string]string {
	out := map[string]string{}
	for _, s := range el.slots {
		if s.clock != "" {
			out["holder-"+s.name] = s.clock
		}
	}
	return out
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
		if err := el.pauseLocked(&s.child); err != nil {
			errs = append(errs, err)
			continue
		}
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

package workload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// children runs the child processes of a workload (the election's holders,
// the cached-read workload's readers): slots, each running one process of
// this binary at a time and another after it exits, until Stop; SIGSTOP of
// chosen ones for a fault, and SIGCONT of them all. The workloads embed it
// and add what their children do.
//
// Concurrency: mu guards the fields below it, every child's cmd and
// running, and whatever the embedding workload says it guards.
type children struct {
	// stopSignal is sent to every running child by Stop (0: none; the
	// child then ends through what the workload does on stop).
	stopSignal syscall.Signal
	all        []*child
	stop       chan struct{} // closed by Stop and KillNow
	wg         sync.WaitGroup

	mu       sync.Mutex
	stopping bool
	paused   []*child
}

// child is one slot: one process at a time.
type child struct {
	log *os.File // the slot's log, shared by its incarnations

	// guarded by children.mu
	cmd     *exec.Cmd
	running string // name of the incarnation running
}

func newChildren(stopSignal syscall.Signal) children {
	return children{stopSignal: stopSignal, stop: make(chan struct{})}
}

// add makes ch a slot; before keep.
func (c *children) add(ch *child) { c.all = append(c.all, ch) }

// openLog opens ch's log at path.
func (ch *child) openLog(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("workload: child log: %w", err)
	}
	ch.log = f
	return nil
}

// mark writes a line of jepsen-lite's own into ch's log.
func (ch *child) mark(format string, args ...any) {
	fmt.Fprintf(ch.log, "=== %s jepsen-lite: %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

// keep runs once(1), once(2), ... one after another, restartAfter apart,
// until Stop.
func (c *children) keep(restartAfter time.Duration, once func(n int)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for n := 1; ; n++ {
			once(n)
			select {
			case <-c.stop:
				return
			case <-time.After(restartAfter):
			}
		}
	}()
}

// errStopping is start's answer once Stop has begun.
var errStopping = errors.New("workload: stopping")

// start starts cmd as ch's process named name, unless Stop has begun.
// The child gets its own process group, as the members do (a Ctrl-C meant
// for jepsen-lite must not reach it first), and dies with jepsen-lite.
func (c *children) start(ch *child, cmd *exec.Cmd, name string, process int) error {
	cmd.Stderr = ch.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	ch.mark("start %s (process %d)", name, process)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return errStopping
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ch.cmd, ch.running = cmd, name
	return nil
}

// exitedLocked records that ch's process has been waited for.
func (c *children) exitedLocked(ch *child) { ch.cmd, ch.running = nil, "" }

// pauseLocked SIGSTOPs ch's running process; ResumeAll undoes it.
func (c *children) pauseLocked(ch *child) error {
	if err := syscall.Kill(ch.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %s: %w", ch.running, err)
	}
	ch.mark("SIGSTOP")
	c.paused = append(c.paused, ch)
	return nil
}

// ResumeAll SIGCONTs every child a fault stopped.
func (c *children) ResumeAll(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resumeLocked()
}

func (c *children) resumeLocked() error {
	var errs []error
	for _, ch := range c.paused {
		// A stopped process cannot exit, so its cmd is still the one
		// that was stopped (only SIGKILL ends it, and Stop resumes first).
		if ch.cmd == nil {
			continue
		}
		if err := syscall.Kill(ch.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			errs = append(errs, fmt.Errorf("SIGCONT %s: %w", ch.running, err))
		}
		ch.mark("SIGCONT")
	}
	c.paused = nil
	return errors.Join(errs...)
}

// Stop ends every child (stopSignal if any, SIGKILL after grace) and waits
// for them. No child starts after Stop.
func (c *children) Stop(grace time.Duration) {
	c.mu.Lock()
	c.stopLocked()
	_ = c.resumeLocked()
	if c.stopSignal != 0 {
		for _, ch := range c.all {
			if ch.cmd != nil {
				_ = syscall.Kill(ch.cmd.Process.Pid, c.stopSignal)
			}
		}
	}
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
	for _, ch := range c.all {
		if ch.log != nil {
			ch.log.Close()
			ch.log = nil // a second Stop (the run's deferred one) finds nothing to do
		}
	}
}

func (c *children) stopLocked() {
	if !c.stopping {
		c.stopping = true
		close(c.stop)
	}
}

// KillNow SIGKILLs every child without waiting: the last resort of a hard
// deadline.
func (c *children) KillNow() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked()
	for _, ch := range c.all {
		if ch.cmd != nil {
			_ = syscall.Kill(ch.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

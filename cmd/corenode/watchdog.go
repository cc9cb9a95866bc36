package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The watchdog is a second, small process between `corenode lock|elect`
// (the supervisor) and CMD. It starts CMD and kills it at the holder-side
// deadline unless the supervisor has moved that deadline on, so CMD stops
// in time even when the supervisor alone is stopped, frozen or slow (a
// SIGSTOP, a ^Z, a GC or swap stall): before, CMD kept running until the
// supervisor ran again, and the next holder's CMD ran beside it.
//
// Each of the two can stop CMD on its own: the supervisor tells the
// watchdog to when leadership ends, and the watchdog acts on the last
// deadline it was given whatever the supervisor does. CMD runs past its
// deadline only if both are stopped while CMD is not (docs/election.md).
//
// The watchdog keeps time on CLOCK_BOOTTIME with a timerfd, so a suspend of
// the machine counts as time passed: on wake the kernel wakes the
// watchdog, and it kills CMD, rather than finishing a wait that the
// suspend did not shorten (Go's timers run on CLOCK_MONOTONIC, which
// stops during a suspend).
//
// The supervisor writes lines to the watchdog's fd 3, the watchdog answers
// on its fd 4:
//
//	D <term> <kill>  deadlines in CLOCK_BOOTTIME ns: SIGTERM to CMD's group at term, SIGKILL at kill; later ones only
//	T                leadership ended on time: SIGTERM now (if not yet), SIGKILL at kill
//	K                SIGKILL now
//	S <n>            pass signal n to CMD's group
//	(end of input)   the supervisor is gone: SIGKILL now
//
//	P <pid>          CMD started (answer)
//	X <wait status> <stopped>  CMD exited, stopped by the watchdog (1) or not (0); the watchdog exits next (answer)
//	E <message>      CMD could not be started (answer)
const watchdogArg = "__watchdog"

// bootClock converts the supervisor's deadlines (Go times, on
// CLOCK_MONOTONIC) to CLOCK_BOOTTIME nanoseconds.
//
// The two clocks run at the same rate, except that BOOTTIME also counts
// time suspended, so BOOTTIME - MONOTONIC only grows. A conversion with the
// offset read once, before the leadership began, therefore gives an
// instant no later than the true one: a suspend since can only make the
// watchdog act early, never late.
type bootClock struct {
	boot0 int64     // CLOCK_BOOTTIME at t0, read before t0
	t0    time.Time // read after boot0: a pause between them errs early
}

func newBootClock() bootClock {
	b := bootNow()
	return bootClock{boot0: b, t0: time.Now()}
}

func (c bootClock) at(t time.Time) int64 { return c.boot0 + int64(t.Sub(c.t0)) }

func bootNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_BOOTTIME): %v", err)) // Linux has had it since 2.6.39
	}
	return ts.Nano()
}

// watchdog is the supervisor's side of a running watchdog process.
type watchdog struct {
	cmd   *exec.Cmd
	clock bootClock
	grace time.Duration

	mu  sync.Mutex // one writer on ctl at a time
	ctl *os.File

	pid int // CMD's, set before startWatchdog returns

	// result receives CMD's exit, or why the watchdog ended without one.
	result chan watchdogResult
}

type watchdogResult struct {
	status syscall.WaitStatus
	// stopped: the watchdog signalled CMD, at a deadline or when told to.
	stopped bool
	err     error // the watchdog failed; status is meaningless
}

// startWatchdog starts the watchdog, which starts command with env, to be
// stopped with SIGTERM at deadline and SIGKILL at deadline+grace unless
// extended. The caller's goroutine must stay locked to its thread for as
// long as the watchdog runs: the kernel sends the watchdog SIGKILL
// (Pdeathsig) when that thread exits, and the watchdog's own Pdeathsig then
// kills CMD, so CMD never outlives a killed supervisor.
func startWatchdog(command, env []string, clock bootClock, deadline time.Time, grace time.Duration) (*watchdog, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("watchdog: find this executable: %w", err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	w := &watchdog{clock: clock, grace: grace, ctl: ctlW, result: make(chan watchdogResult, 1)}
	w.cmd = exec.Command(self, append([]string{watchdogArg, "--"}, command...)...)
	w.cmd.Stdin, w.cmd.Stdout, w.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	w.cmd.Env = env
	w.cmd.ExtraFiles = []*os.File{ctlR, stW}
	// Its own process group: a ^Z or a signal to the supervisor's group
	// stops the supervisor, not the watchdog.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// The first deadline goes before the start, so the watchdog never runs
	// CMD without one.
	if err := w.send(w.deadlineLine(deadline)); err != nil {
		ctlR.Close()
		ctlW.Close()
		stR.Close()
		stW.Close()
		return nil, err
	}
	err = w.cmd.Start()
	ctlR.Close()
	stW.Close()
	if err != nil {
		ctlW.Close()
		stR.Close()
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	started := make(chan error, 1)
	go w.read(stR, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return w, nil
}

// read follows the watchdog's answers: started hears whether CMD started,
// result how it ended.
func (w *watchdog) read(r io.ReadCloser, started chan<- error) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	res := watchdogResult{err: errors.New("the watchdog process ended without reporting CMD's exit")}
	for sc.Scan() {
		kind, arg, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "P":
			if started != nil {
				w.pid, _ = strconv.Atoi(arg)
				started <- nil
				started = nil
			}
		case "E":
			res.err = errors.New(arg)
		case "X":
			ws, stopped, _ := strings.Cut(arg, " ")
			n, err := strconv.ParseUint(ws, 10, 32)
			if err != nil {
				res.err = fmt.Errorf("watchdog: bad exit report %q", arg)
				break
			}
			res = watchdogResult{status: syscall.WaitStatus(n), stopped: stopped == "1"}
		}
	}
	werr := w.cmd.Wait()
	if res.err != nil && werr != nil {
		res.err = fmt.Errorf("%w (%v)", res.err, werr)
	}
	if started != nil {
		started <- res.err
	}
	w.ctl.Close()
	w.result <- res
}

func (w *watchdog) deadlineLine(deadline time.Time) string {
	return fmt.Sprintf("D %d %d", w.clock.at(deadline), w.clock.at(deadline.Add(w.grace)))
}

func (w *watchdog) send(line string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := io.WriteString(w.ctl, line+"\n"); err != nil {
		return fmt.Errorf("watchdog: %w", err)
	}
	return nil
}

// extend moves CMD's deadline on to deadline (SIGKILL at deadline+grace).
func (w *watchdog) extend(deadline time.Time) { _ = w.send(w.deadlineLine(deadline)) }

// stop stops CMD, gracefully (SIGTERM now, SIGKILL at the deadline's end
// of grace) or with SIGKILL now, and returns CMD's exit. The supervisor
// sends the SIGKILL itself too, so that a watchdog stopped alone does not
// keep CMD running.
func (w *watchdog) stop(graceful bool, deadline time.Time) watchdogResult {
	if !graceful {
		_ = w.send("K")
		w.killGroup()
		return <-w.result
	}
	_ = w.send("T")
	t := time.NewTimer(time.Until(deadline.Add(w.grace)))
	defer t.Stop()
	select {
	case res := <-w.result:
		return res
	case <-t.C:
		w.killGroup()
		return <-w.result
	}
}

// killGroup sends SIGKILL to CMD's process group. CMD's pid, and so the
// group's id, cannot be reused before the watchdog has reaped CMD, which
// it reports at once; only a wrap-around of pids in that moment could make
// this reach another group.
func (w *watchdog) killGroup() {
	if w.pid > 0 {
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
	}
}

func (w *watchdog) signal(sig syscall.Signal) { _ = w.send("S " + strconv.Itoa(int(sig))) }

// runWatchdog is the watchdog process: `corenode __watchdog -- CMD ARGS`,
// started by startWatchdog with its control pipe on fd 3 and its answers
// on fd 4.
func runWatchdog(args []string) int {
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintln(os.Stderr, "corenode: "+watchdogArg+" is started by corenode lock and elect, not by hand")
		return exitHoldUsage
	}
	ctl, answers := os.NewFile(3, "control"), os.NewFile(4, "answers")
	if ctl == nil || answers == nil {
		fmt.Fprintln(os.Stderr, "corenode "+watchdogArg+": no control pipe")
		return exitHoldUsage
	}
	answer := func(format string, a ...any) { fmt.Fprintf(answers, format+"\n", a...) }
	d := &dogState{}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	first, ok := <-lines
	if !ok || !d.apply(first) || d.killAt == 0 {
		answer("E watchdog: no deadline from the supervisor")
		return exitHoldError
	}
	if bootNow() >= d.killAt {
		answer("E watchdog: the deadline passed before CMD started")
		return exitHoldError
	}
	timer, err := newBootTimer()
	if err != nil {
		answer("E watchdog: %v", err)
		return exitHoldError
	}
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Pdeathsig fires when the thread that started CMD exits: keep it.
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		answer("E %v", err)
		return exitHoldError
	}
	d.group = -cmd.Process.Pid
	answer("P %d", cmd.Process.Pid)
	exited := make(chan syscall.WaitStatus, 1)
	go func() {
		_ = cmd.Wait()
		exited <- cmd.ProcessState.Sys().(syscall.WaitStatus)
	}()
	for {
		if err := timer.set(d.next()); err != nil {
			// Without a timer only the supervisor could stop CMD: stop it now.
			d.kill()
		}
		select {
		case line, ok := <-lines:
			if !ok {
				d.kill() // the supervisor is gone
				lines = nil
				continue
			}
			d.apply(line)
		case <-timer.fired:
			d.tick(bootNow())
		case ws := <-exited:
			if d.stopping {
				// CMD is gone; what it started in its group may not be.
				_ = syscall.Kill(d.group, syscall.SIGKILL)
			}
			stopped := 0
			if d.termSent || d.killed {
				stopped = 1
			}
			answer("X %d %d", uint32(ws), stopped)
			return 0
		}
	}
}

// dogState is the watchdog's decision state; its methods signal CMD's
// group and never block.
type dogState struct {
	group          int   // -pid of CMD, once started
	termAt, killAt int64 // CLOCK_BOOTTIME ns
	termSent       bool
	killed         bool
	stopping       bool // told to stop, or past a deadline
}

// apply carries out one line from the supervisor; false if it is not one.
func (d *dogState) apply(line string) bool {
	f := strings.Fields(line)
	if len(f) == 0 {
		return false
	}
	switch {
	case f[0] == "D" && len(f) == 3:
		term, err1 := strconv.ParseInt(f[1], 10, 64)
		kill, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if d.stopping {
			return true // a deadline heard after the end does not revive CMD
		}
		d.termAt, d.killAt = max(d.termAt, term), max(d.killAt, kill)
	case f[0] == "T" && len(f) == 1:
		d.stopping = true
		d.term()
	case f[0] == "K" && len(f) == 1:
		d.kill()
	case f[0] == "S" && len(f) == 2:
		n, err := strconv.Atoi(f[1])
		if err != nil || d.group == 0 {
			return false
		}
		_ = syscall.Kill(d.group, syscall.Signal(n))
	default:
		return false
	}
	return true
}

// tick acts on the deadlines at boot time now.
func (d *dogState) tick(now int64) {
	switch {
	case now >= d.killAt:
		d.kill()
	case now >= d.termAt:
		d.stopping = true
		d.term()
	}
}

func (d *dogState) term() {
	if !d.termSent && !d.killed && d.group != 0 {
		d.termSent = true
		_ = syscall.Kill(d.group, syscall.SIGTERM)
	}
}

func (d *dogState) kill() {
	d.stopping = true
	if !d.killed && d.group != 0 {
		d.killed = true
		_ = syscall.Kill(d.group, syscall.SIGKILL)
	}
}

// next is the instant the timer is next due, 0 for none.
func (d *dogState) next() int64 {
	switch {
	case d.killed:
		return 0
	case d.termSent:
		return d.killAt
	default:
		return d.termAt
	}
}

// bootTimer is a timerfd on CLOCK_BOOTTIME: fired receives a value each
// time it expires.
type bootTimer struct {
	fd    int
	fired chan struct{}
}

func newBootTimer() (*bootTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create(CLOCK_BOOTTIME): %w", err)
	}
	t := &bootTimer{fd: fd, fired: make(chan struct{}, 1)}
	// A non-blocking fd read through os.File waits in Go's poller.
	f := os.NewFile(uintptr(fd), "timerfd")
	go func() {
		var buf [8]byte
		for {
			if _, err := f.Read(buf[:]); err != nil {
				return
			}
			select {
			case t.fired <- struct{}{}:
			default:
			}
		}
	}()
	return t, nil
}

// set arms the timer for CLOCK_BOOTTIME instant at (ns), or disarms it for 0.
// An instant already past fires at once.
func (t *bootTimer) set(at int64) error {
	spec := unix.ItimerSpec{}
	if at > 0 {
		spec.Value = unix.NsecToTimespec(at)
	}
	if err := unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		return fmt.Errorf("timerfd_settime: %w", err)
	}
	return nil
}

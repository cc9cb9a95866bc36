package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
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
// "CMD" is everything CMD started, too: a child that left CMD's process
// group, a daemon that double-forked, must not outlive the lock either.
// So the watchdog is the init of a PID namespace of its own, and CMD runs
// inside it: when the namespace's init dies, however (SIGKILL, or the
// kernel's Pdeathsig after the supervisor died), the kernel kills every
// process of the namespace, and no setsid or double fork leaves it. The
// watchdog, as init, reaps every orphan, and once CMD has exited, or been
// stopped, it kills the rest of the namespace and reaps it before it
// reports CMD's exit; the supervisor releases the lock only after that
// report, or after the watchdog's own exit, which the kernel completes
// only once the namespace is empty. Where no PID namespace can be made
// (not root and no unprivileged user namespaces) both processes are
// child subreapers and kill what they find by parent chain instead
// (isolation below), which leaves one case open: both killed at once.
//
// The watchdog keeps time on CLOCK_BOOTTIME with a timerfd, so a suspend of
// the machine counts as time passed: on wake the kernel wakes the
// watchdog, and it kills CMD, rather than finishing a wait that the
// suspend did not shorten (Go's timers run on CLOCK_MONOTONIC, which
// stops during a suspend).
//
// The supervisor writes lines to the watchdog's fd 3, the watchdog answers
// on its fd 4 (neither reaches CMD):
//
//	D <term> <kill>  deadlines in CLOCK_BOOTTIME ns: SIGTERM to all CMD started at term, SIGKILL at kill; later ones only
//	T                leadership ended on time: SIGTERM to all now (if not yet), SIGKILL at kill
//	K                SIGKILL to all now
//	S <n>            pass signal n to CMD's process group (only: as a terminal would)
//	(end of input)   the supervisor is gone: SIGKILL to all now
//
//	P <pid>          CMD started, pid as the watchdog sees it (in its namespace, if it has one) (answer)
//	X <wait status> <stopped>  CMD exited, stopped by the watchdog (1) or not (0), and all it started is gone; the watchdog exits next (answer)
//	E <message>      CMD could not be started (answer)
const watchdogArg = "__watchdog"

// isolation is how the watchdog keeps what CMD started from outliving it.
type isolation int

const (
	// isolatePID: a new PID namespace (CLONE_NEWPID), for a supervisor with
	// CAP_SYS_ADMIN (root).
	isolatePID isolation = iota
	// isolateUserPID: a new user namespace that maps the caller's own uid
	// and gid onto themselves, and a PID namespace in it, where the kernel
	// lets anyone make one.
	isolateUserPID
	// isolateSubreaper: no namespace. The watchdog and the supervisor are
	// child subreapers and kill descendants by parent chain; if both are
	// killed at once, what CMD left behind goes to init and runs on.
	isolateSubreaper
)

func (i isolation) String() string {
	return [...]string{"PID namespace", "user and PID namespace", "subreaper"}[i]
}

// testIsolationEnv is for tests only, not a user setting: "userns" skips
// the plain PID namespace (so root tests the unprivileged path) and "off"
// forces the subreaper fallback, which a root or user-namespace machine
// would otherwise never take.
const testIsolationEnv = "CORENODE_TEST_LOCK_ISOLATION"

func isolationsToTry() []isolation {
	switch os.Getenv(testIsolationEnv) {
	case "userns":
		return []isolation{isolateUserPID}
	case "off":
		return []isolation{isolateSubreaper}
	}
	return []isolation{isolatePID, isolateUserPID, isolateSubreaper}
}

// sysProcAttr is the watchdog's start for isolation i.
func (i isolation) sysProcAttr() *syscall.SysProcAttr {
	// Its own process group: a ^Z or a signal to the supervisor's group
	// stops the supervisor, not the watchdog.
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// (Go's check after setting Pdeathsig, that the parent still lives,
	// sees no parent from inside a new namespace and SIGKILLs the child,
	// which as init of that namespace ignores it. The watchdog's reading
	// of the control pipe covers a supervisor that died before that: it
	// kills everything on end of input.)
	switch i {
	case isolatePID:
		a.Cloneflags = syscall.CLONE_NEWPID
	case isolateUserPID:
		a.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		a.GidMappingsEnableSetgroups = false
	case isolateSubreaper:
		// No Pdeathsig: killed with the supervisor, the watchdog could not
		// kill what CMD left behind; it hears the supervisor's death as the
		// end of its control pipe.
		a.Pdeathsig = 0
	}
	return a
}

// cannotIsolate says whether a start with a namespace failed because the
// kernel or its policy refuses one (no privilege, user namespaces off or
// restricted, too many namespaces), so the next isolation may do.
func cannotIsolate(err error) bool {
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.EACCES, syscall.EINVAL, syscall.ENOSPC, syscall.EUSERS, syscall.ENOSYS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

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

	// iso is how CMD is kept in; noIsolation why it is not in a namespace.
	iso         isolation
	noIsolation error

	// pid is CMD's as the watchdog reported it, set before startWatchdog
	// returns: in the watchdog's PID namespace if it has one, where this
	// process must not use it.
	pid int

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
// (Pdeathsig) when that thread exits, and the watchdog's death then kills
// all of CMD's namespace, so nothing of CMD outlives a killed supervisor.
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
	// The first deadline goes before the start, so the watchdog never runs
	// CMD without one.
	if err := w.send(w.deadlineLine(deadline)); err != nil {
		ctlR.Close()
		ctlW.Close()
		stR.Close()
		stW.Close()
		return nil, err
	}
	for _, iso := range isolationsToTry() {
		w.iso = iso
		if iso == isolateSubreaper {
			// Orphans of CMD's whose watchdog was killed come here.
			if err = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
				err = fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
				break
			}
		}
		w.cmd = exec.Command(self, append([]string{watchdogArg, "--"}, command...)...)
		w.cmd.Stdin, w.cmd.Stdout, w.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		w.cmd.Env = env
		w.cmd.ExtraFiles = []*os.File{ctlR, stW}
		w.cmd.SysProcAttr = iso.sysProcAttr()
		if err = w.cmd.Start(); err == nil || iso == isolateSubreaper || !cannotIsolate(err) {
			break
		}
		// Each refusal is part of the why (one line: "; " between them).
		if w.noIsolation == nil {
			w.noIsolation = fmt.Errorf("%v: %w", iso, err)
		} else {
			w.noIsolation = fmt.Errorf("%w; %v: %w", w.noIsolation, iso, err)
		}
	}
	ctlR.Close()
	stW.Close()
	if err != nil {
		ctlW.Close()
		stR.Close()
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	if w.iso != isolateSubreaper {
		w.noIsolation = nil
	} else if w.noIsolation == nil {
		w.noIsolation = errors.New(testIsolationEnv + " is set")
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
	if w.iso == isolateSubreaper {
		// What CMD started and the watchdog did not kill (it was killed
		// itself) was reparented here: kill it before the lock goes.
		killDescendants(nil)
	}
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
		w.kill()
		return <-w.result
	}
	_ = w.send("T")
	t := time.NewTimer(time.Until(deadline.Add(w.grace)))
	defer t.Stop()
	select {
	case res := <-w.result:
		return res
	case <-t.C:
		w.kill()
		return <-w.result
	}
}

// kill is the supervisor's own SIGKILL of CMD and all it started. In a
// PID namespace that is the watchdog's death: the kernel then kills the
// rest of the namespace. Without one it is CMD's process group and the
// watchdog's descendants, once (the watchdog, if it is stopped, kills
// what they fork meanwhile when it runs; if it is dead, read kills what
// came here). CMD's pid, and so the group's id, cannot be reused before
// the watchdog has reaped CMD, which it reports at once; only a
// wrap-around of pids in that moment could make this reach another group.
func (w *watchdog) kill() {
	if w.iso != isolateSubreaper {
		_ = w.cmd.Process.Kill()
		return
	}
	if w.pid > 0 {
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
	}
	signalDescendants(w.cmd.Process.Pid, syscall.SIGKILL)
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
	// The pipes are the supervisor's and this process's: CMD holding one
	// would keep the supervisor from seeing this process end.
	unix.CloseOnExec(3)
	unix.CloseOnExec(4)
	ctl, answers := os.NewFile(3, "control"), os.NewFile(4, "answers")
	if ctl == nil || answers == nil {
		fmt.Fprintln(os.Stderr, "corenode "+watchdogArg+": no control pipe")
		return exitHoldUsage
	}
	answer := func(format string, a ...any) { fmt.Fprintf(answers, format+"\n", a...) }
	// Pdeathsig fires when the thread that started CMD exits: keep it.
	runtime.LockOSThread()
	nsInit := os.Getpid() == 1 // startWatchdog made a PID namespace
	all := signalNamespace
	if !nsInit {
		// No PID namespace: what CMD leaves behind is reparented here, not
		// to init, and found by its parent chain.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			answer("E watchdog: prctl(PR_SET_CHILD_SUBREAPER): %v", err)
			return exitHoldError
		}
		all = signalOwnDescendants
	}
	// Before CMD starts, so no exit goes unheard.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	// Only the supervisor and the deadlines stop CMD. As init of its
	// namespace this process would otherwise end on such a signal from
	// CMD (Go's default action) and take the namespace with it; a handler,
	// unlike an ignored signal, is not inherited by CMD.
	ignored := make(chan os.Signal, 4)
	signal.Notify(ignored, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	d := &dogState{all: all}
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
	path, err := exec.LookPath(args[1])
	if err != nil {
		answer("E %v", err)
		return exitHoldError
	}
	// Not exec.Cmd: its Wait would race with the reaping below, which
	// takes CMD's exit with the rest.
	pid, err := syscall.ForkExec(path, args[1:], &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		answer("E fork/exec %s: %v", args[1], err)
		return exitHoldError
	}
	d.group = -pid
	answer("P %d", pid)
	var status unix.WaitStatus
	exited := false
	onReap := func(p int, ws unix.WaitStatus) {
		if p == pid {
			status, exited = ws, true
		}
	}
	for !exited {
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
		case <-chld:
			reapAll(onReap)
		case <-ignored:
		}
	}
	// CMD is gone; nothing it started may outlive it, stopped or not.
	if nsInit {
		killNamespace(onReap)
	} else {
		killDescendants(onReap)
	}
	stopped := 0
	if d.termSent || d.killed {
		stopped = 1
	}
	answer("X %d %d", uint32(status), stopped)
	return 0
}

// signalNamespace sends sig to every process of this one's PID namespace
// but itself: from the namespace's init, kill(-1) reaches them all.
func signalNamespace(sig syscall.Signal) { _ = unix.Kill(-1, sig) }

// signalOwnDescendants sends sig to every descendant of this process.
func signalOwnDescendants(sig syscall.Signal) { signalDescendants(os.Getpid(), sig) }

// killNamespace SIGKILLs every other process of this init's PID namespace
// and reaps until none is left: all of them are this process's children,
// or become so when their parents die.
func killNamespace(onReap func(pid int, ws unix.WaitStatus)) {
	for {
		_ = unix.Kill(-1, syscall.SIGKILL)
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case pid > 0:
			onReap(pid, ws)
		case errors.Is(err, unix.ECHILD):
			// No child left. A process that joined the namespace from
			// outside (setns) is not one: wait until kill finds none.
			if errors.Is(unix.Kill(-1, 0), unix.ESRCH) {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// dogState is the watchdog's decision state; its methods signal CMD and
// what it started, and never block.
type dogState struct {
	group int // -pid of CMD, once started
	// all sends a stop signal to every process CMD started, CMD included.
	all            func(syscall.Signal)
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
		// A signal passed on goes where a terminal would send it: CMD's
		// group. What left the group decides for itself, until the stop.
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
		d.all(syscall.SIGTERM)
	}
}

func (d *dogState) kill() {
	d.stopping = true
	if !d.killed && d.group != 0 {
		d.killed = true
		d.all(syscall.SIGKILL)
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

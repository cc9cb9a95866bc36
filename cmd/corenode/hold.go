package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/corenode/corenode/client/election"
)

// `corenode lock NAME -- CMD ARGS` and `corenode elect NAME VALUE -- CMD ARGS`
// run CMD only while this process holds the lock or leads the election, and
// stop it before the cluster could hand the lease to a successor.

// Exit statuses of lock and elect other than CMD's own.
const (
	exitHoldError = 1 // could not campaign or start CMD
	exitHoldUsage = 2
	exitHoldLost  = 3 // leadership was lost while CMD ran; CMD was stopped
)

// tokenEnv carries the fencing token to CMD.
const tokenEnv = "CORENODE_FENCING_TOKEN"

type holdOptions struct {
	conn  connFlags
	ttl   int
	grace time.Duration
}

func holdSynopsis(kind string) string {
	what := "NAME"
	if kind == "elect" {
		what = "NAME VALUE"
	}
	return fmt.Sprintf("corenode %s [--endpoints E] [--user U] [--cacert F] [--ttl S] [--grace D] ... %s -- CMD [ARGS...]", kind, what)
}

// hold runs `corenode lock` (kind "lock") or `corenode elect` (kind "elect").
func hold(kind string, args []string) int {
	o, names, command, code := parseHold(kind, args)
	if code >= 0 {
		return code
	}
	ttl := time.Duration(o.ttl) * time.Second
	margin := election.DefaultDriftMargin(ttl)
	if o.grace < 0 {
		o.grace = margin
	}
	if margin+o.grace >= ttl {
		fmt.Fprintf(os.Stderr, "corenode %s: --grace %v plus the drift margin %v must be shorter than --ttl %v\n", kind, o.grace, margin, ttl)
		return exitHoldUsage
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cli, err := o.conn.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "corenode %s: %v\n", kind, err)
		return exitHoldError
	}
	defer cli.Close()
	if err := checkAccess(cli, names[0]+"/", o.conn.commandTimeout); err != nil {
		fmt.Fprintf(os.Stderr, "corenode %s: %v\n", kind, err)
		return exitHoldError
	}
	// Until CMD runs, SIGINT, SIGTERM and SIGHUP abandon the campaign; then
	// they are passed on to CMD.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	campaigning := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-campaigning:
		}
	}()

	// The watchdog's clock is read before the lease is granted (see
	// bootClock). Leadership ends grace before the drift-margin deadline,
	// so that the SIGKILL at the end of the grace still lands before the
	// cluster could expire the lease.
	relay := &renewRelay{clock: newBootClock()}
	opts := []election.Option{election.WithTTL(ttl), election.WithDriftMargin(margin + o.grace), election.WithLogger(log),
		election.WithOnRenew(relay.renewed)}
	var l *election.Leadership
	if kind == "lock" {
		l, err = election.Lock(ctx, cli, names[0], opts...)
	} else {
		l, err = election.Campaign(ctx, cli, names[0], names[1], opts...)
	}
	close(campaigning)
	if err != nil {
		fmt.Fprintf(os.Stderr, "corenode %s: %v\n", kind, err)
		return exitHoldError
	}
	code = supervise(kind, l, relay, command, o.grace, sigs)
	rctx, rcancel := context.WithTimeout(context.Background(), o.conn.commandTimeout)
	defer rcancel()
	if err := l.Resign(rctx); err != nil {
		fmt.Fprintf(os.Stderr, "corenode %s: release: %v\n", kind, err)
	}
	return code
}

// parseHold reads flags (anywhere before "--"), the names, and CMD. code
// is the exit status when there is nothing to run (-h, a usage error), else -1.
func parseHold(kind string, args []string) (o holdOptions, names, command []string, code int) {
	fs := flag.NewFlagSet("corenode "+kind, flag.ContinueOnError)
	o.conn.register(fs)
	fs.IntVar(&o.ttl, "ttl", 10, "lease TTL in seconds")
	o.grace = -1 // the drift margin, once --ttl is known
	fs.Var((*computedDuration)(&o.grace), "grace", "the `duration` CMD gets between SIGTERM and SIGKILL (default: the drift margin, 1% of the TTL + 50ms); leadership ends this much earlier")
	want := 1
	if kind == "elect" {
		want = 2
	}
	names, command, err := parseCommandLine(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(fs, holdSynopsis(kind))
		return o, nil, nil, 0
	case err == nil && len(names) != want:
		err = fmt.Errorf("want %d argument(s) before \"--\", got %q", want, names)
	case err == nil && len(command) == 0:
		err = errors.New(`no command: put it after "--"`)
	case err == nil && o.ttl <= 0:
		err = fmt.Errorf("--ttl %d is not positive", o.ttl)
	}
	if err == nil {
		err = checkHoldName(kind, names[0])
	}
	if err == nil {
		err = o.conn.check()
	}
	if err != nil {
		fmt.Fprint(os.Stderr, usageLines("corenode "+kind, err, holdSynopsis(kind)))
		return o, nil, nil, exitHoldUsage
	}
	return o, names, command, -1
}

// supervise runs command while l leads and returns the exit status: CMD's
// own when it exits while leading, exitHoldLost when leadership ends first.
//
// CMD runs under a watchdog process (watchdog.go) that kills it, and all
// it started, at the deadline unless this process has moved the deadline
// on (relay forwards every renewal). CMD runs in its own process group;
// the catch is that an interactive CMD is not in the terminal's
// foreground group, which is why SIGINT and SIGTERM sent to corenode are
// passed on. If corenode itself dies, the kernel sends the watchdog
// SIGKILL (Pdeathsig), and the watchdog's death ends its PID namespace,
// CMD's with it; Pdeathsig goes when the thread that started the process
// exits, so the calling goroutine stays locked to its thread for the rest
// of the process.
func supervise(kind string, l *election.Leadership, relay *renewRelay, command []string, grace time.Duration, sigs <-chan os.Signal) int {
	token, ok := l.Leading()
	if !ok {
		fmt.Fprintf(os.Stderr, "corenode %s: leadership lost before CMD started: %v\n", kind, context.Cause(l.Context()))
		return exitHoldLost
	}
	env := append(os.Environ(), tokenEnv+"="+strconv.FormatInt(token, 10))
	runtime.LockOSThread()
	wd, err := relay.start(l.Deadline(), func(deadline time.Time) (*watchdog, error) {
		return startWatchdog(command, env, relay.clock, deadline, grace)
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "corenode %s: %v\n", kind, err)
		return exitHoldError
	}
	if wd.noIsolation != nil {
		fmt.Fprintf(os.Stderr, "corenode %s: warning: no PID namespace for CMD (%v): if this process and its watchdog are both killed, "+
			"what CMD started can outlive the lock; run as root or enable unprivileged user namespaces\n", kind, wd.noIsolation)
	}
	for {
		select {
		case res := <-wd.result:
			if res.err != nil {
				fmt.Fprintf(os.Stderr, "corenode %s: %v\n", kind, res.err)
				return exitHoldError
			}
			// CMD's exit can be the first news of a lost leadership: the
			// watchdog stopped it while this process was paused.
			if _, leading := l.Leading(); !leading || res.stopped {
				cause := context.Cause(l.Context())
				if cause == nil {
					cause = election.ErrExpired // the watchdog's clock ran out a moment before ours
				}
				fmt.Fprintf(os.Stderr, "corenode %s: leadership lost (%v); CMD stopped by the watchdog\n", kind, cause)
				return exitHoldLost
			}
			return waitStatus(res.status)
		case sig := <-sigs:
			wd.signal(sig.(syscall.Signal))
		case <-l.Done():
			cause := context.Cause(l.Context())
			wd.stop(stopGracefully(cause, l.Deadline(), grace, time.Now()), l.Deadline())
			fmt.Fprintf(os.Stderr, "corenode %s: leadership lost (%v); CMD stopped\n", kind, cause)
			return exitHoldLost
		}
	}
}

// renewRelay hands each new deadline of a leadership to its watchdog, once
// there is one; a renewal while the watchdog starts waits for it, so none
// is lost between the first deadline and the watchdog.
type renewRelay struct {
	clock bootClock
	mu    sync.Mutex
	wd    *watchdog
	last  time.Time
}

func (r *renewRelay) renewed(deadline time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = deadline
	if r.wd != nil {
		r.wd.extend(deadline)
	}
}

// start starts the watchdog with the latest deadline heard, or first if
// none was, and hands it any renewal heard while it started. Renewals do
// not wait for the start (the keeper's renewals must not stall on an exec).
func (r *renewRelay) start(first time.Time, start func(time.Time) (*watchdog, error)) (*watchdog, error) {
	r.mu.Lock()
	d := first
	if r.last.After(d) {
		d = r.last
	}
	r.mu.Unlock()
	wd, err := start(d)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wd = wd
	if r.last.After(d) {
		wd.extend(r.last)
	}
	return wd, nil
}

// stopGracefully decides how to stop CMD once leadership has ended.
// Leadership that ran out on this holder's clock ended grace before the
// drift-margin deadline, so CMD gets SIGTERM and, until deadline+grace
// (when the watchdog sends SIGKILL), time to finish. Noticed late (this
// process was paused), or ended because the lease or key is already gone,
// a successor may be running: SIGKILL at once.
func stopGracefully(cause error, deadline time.Time, grace time.Duration, now time.Time) bool {
	return errors.Is(cause, election.ErrExpired) && now.Before(deadline.Add(grace))
}

// waitStatus is CMD's exit status as a shell reports it (128+n when killed
// by signal n).
func waitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// computedDuration is a duration flag whose default is computed from
// other flags: it holds a negative value until set, and -h shows no
// default for it.
type computedDuration time.Duration

func (d *computedDuration) String() string {
	if d == nil || *d <= 0 {
		return ""
	}
	return time.Duration(*d).String()
}

func (d *computedDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("%v must not be negative", v)
	}
	*d = computedDuration(v)
	return nil
}

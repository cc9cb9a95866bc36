package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

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
	endpoints string
	ttl       int
	grace     time.Duration
}

func holdSynopsis(kind string) string {
	what := "NAME"
	if kind == "elect" {
		what = "NAME VALUE"
	}
	return fmt.Sprintf("corenode %s [--endpoints E] [--ttl S] [--grace D] %s -- CMD [ARGS...]", kind, what)
}

func holdUsage(kind string) string { return "Usage: " + holdSynopsis(kind) }

// hold runs `corenode lock` (kind "lock") or `corenode elect` (kind "elect").
func hold(kind string, args []string) int {
	o, names, command, err := parseHold(kind, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "corenode %s: %v\n%s\n", kind, err, holdUsage(kind))
		return exitHoldUsage
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cli, err := clientv3.New(clientv3.Config{Endpoints: splitURLs(o.endpoints), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "corenode %s: %v\n", kind, err)
		return exitHoldError
	}
	defer cli.Close()

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

	ttl := time.Duration(o.ttl) * time.Second
	margin := election.DefaultDriftMargin(ttl)
	if o.grace < 0 {
		o.grace = margin
	}
	if margin+o.grace >= ttl {
		fmt.Fprintf(os.Stderr, "corenode %s: --grace %v plus the drift margin %v must be shorter than --ttl %v\n", kind, o.grace, margin, ttl)
		return exitHoldUsage
	}
	// Leadership ends grace before the drift-margin deadline, so that the
	// SIGKILL at the end of the grace still lands before the cluster could
	// expire the lease.
	opts := []election.Option{election.WithTTL(ttl), election.WithDriftMargin(margin + o.grace), election.WithLogger(log)}
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
	code := supervise(kind, l, command, o.grace, sigs)
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	if err := l.Resign(rctx); err != nil {
		fmt.Fprintf(os.Stderr, "corenode %s: release: %v\n", kind, err)
	}
	return code
}

// parseHold reads flags (anywhere before "--"), the names, and CMD.
func parseHold(kind string, args []string) (holdOptions, []string, []string, error) {
	o := holdOptions{endpoints: "127.0.0.1:2379"}
	fs := flag.NewFlagSet("corenode "+kind, flag.ContinueOnError)
	fs.StringVar(&o.endpoints, "endpoints", o.endpoints, "comma-separated client endpoints (default from ETCDCTL_ENDPOINTS when set)")
	fs.IntVar(&o.ttl, "ttl", 10, "lease TTL in seconds")
	fs.DurationVar(&o.grace, "grace", -1, "time CMD gets between SIGTERM and SIGKILL (default: the drift margin, 1% of the TTL + 50ms); leadership ends this much earlier")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), holdUsage(kind))
		fs.PrintDefaults()
	}
	sep := -1
	for i, a := range args {
		if a == "--" {
			sep = i
			break
		}
	}
	if sep < 0 || sep == len(args)-1 {
		return o, nil, nil, errors.New(`no command: put it after "--"`)
	}
	var names []string
	rest := args[:sep]
	for {
		if err := fs.Parse(rest); err != nil {
			return o, nil, nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		names, rest = append(names, fs.Arg(0)), fs.Args()[1:]
	}
	want := 1
	if kind == "elect" {
		want = 2
	}
	if len(names) != want {
		return o, nil, nil, fmt.Errorf("want %d argument(s) before \"--\", got %q", want, names)
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "endpoints" })
	if env := os.Getenv("ETCDCTL_ENDPOINTS"); env != "" && !given {
		o.endpoints = env
	}
	if o.ttl <= 0 {
		return o, nil, nil, fmt.Errorf("--ttl %d is not positive", o.ttl)
	}
	return o, names, args[sep+1:], nil
}

// supervise runs command while l leads and returns the exit status: CMD's
// own when it exits while leading, exitHoldLost when leadership ends first.
//
// CMD runs in its own process group, so the stop signals reach what it
// started too (a shell's children); the catch is that an interactive CMD
// is not in the terminal's foreground group, which is why SIGINT and
// SIGTERM sent to corenode are passed on. If corenode itself dies, the
// kernel sends CMD SIGKILL (Pdeathsig); that signal goes when the thread
// that started CMD exits, so the calling goroutine stays locked to its
// thread for the rest of the process.
func supervise(kind string, l *election.Leadership, command []string, grace time.Duration, sigs <-chan os.Signal) int {
	token, ok := l.Leading()
	if !ok {
		fmt.Fprintf(os.Stderr, "corenode %s: leadership lost before CMD started: %v\n", kind, context.Cause(l.Context()))
		return exitHoldLost
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), tokenEnv+"="+strconv.FormatInt(token, 10))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "corenode %s: %v\n", kind, err)
		return exitHoldError
	}
	group := -cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		select {
		case err := <-exited:
			return exitStatus(err)
		case sig := <-sigs:
			_ = syscall.Kill(group, sig.(syscall.Signal))
		case <-l.Done():
			cause := context.Cause(l.Context())
			stopCommand(group, exited, stopPlanFor(cause, l.Deadline(), grace, time.Now()))
			fmt.Fprintf(os.Stderr, "corenode %s: leadership lost (%v); CMD stopped\n", kind, cause)
			return exitHoldLost
		}
	}
}

// stopPlan says how to stop CMD once leadership has ended: SIGTERM now and
// SIGKILL at killAt, or (term false) SIGKILL at once.
type stopPlan struct {
	term   bool
	killAt time.Time
}

// stopPlanFor decides how to stop CMD. Leadership that ran out on this
// holder's clock ended grace before the drift-margin deadline, so CMD gets
// SIGTERM and, until deadline+grace, time to finish. Noticed late (this
// process was paused), or ended because the lease or key is already gone,
// a successor may be running: SIGKILL at once.
func stopPlanFor(cause error, deadline time.Time, grace time.Duration, now time.Time) stopPlan {
	killAt := deadline.Add(grace)
	if errors.Is(cause, election.ErrExpired) && now.Before(killAt) {
		return stopPlan{term: true, killAt: killAt}
	}
	return stopPlan{killAt: now}
}

// stopCommand carries out p and returns once CMD has exited.
func stopCommand(group int, exited <-chan error, p stopPlan) {
	if p.term {
		_ = syscall.Kill(group, syscall.SIGTERM)
		t := time.NewTimer(time.Until(p.killAt))
		defer t.Stop()
		select {
		case <-exited:
			// CMD is gone, but what it started in its group may not be.
			_ = syscall.Kill(group, syscall.SIGKILL)
			return
		case <-t.C:
		}
	}
	_ = syscall.Kill(group, syscall.SIGKILL)
	<-exited
}

// exitStatus is CMD's exit status as a shell reports it (128+n when killed
// by signal n).
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintln(os.Stderr, "corenode:", strings.TrimSpace(err.Error()))
	return exitHoldError
}

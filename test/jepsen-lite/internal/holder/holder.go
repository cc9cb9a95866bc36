// Package holder is the program of one election holder: a separate
// process (jepsen-lite re-executed with the hidden "holder" subcommand)
// that campaigns on an election prefix, acts every few milliseconds while
// it believes it leads, makes a fenced write to corenode with its token,
// and reports each of these as a JSON line on stdout. It exits when it
// notices it no longer leads; the workload starts another in its place.
//
// It is a process of its own so that the nemesis can SIGSTOP it, as a GC
// pause or a stalled VM would stop a real service, while the cluster and
// the other holders go on.
package holder

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/internal/rateclock"
	"github.com/corenode/corenode/test/jepsen-lite/internal/cluster"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// Command is the hidden subcommand of jepsen-lite that runs a holder.
const Command = "holder"

// Exit statuses of a holder process.
const (
	ExitResigned = 0 // stopped by SIGTERM, resigned
	ExitError    = 2 // could not campaign (cluster unreachable, bad flags)
	ExitLost     = 3 // led, then noticed it no longer did
)

// Event kinds on the holder's stdout.
const (
	EvElected = "elected" // Mono: campaign start, End: campaign returned; Token, Key
	EvAct     = "act"     // Mono: the action's time; Token
	EvWrite   = "write"   // Mono: sent, End: answered; Token, Committed, Rev, Err
	EvLost    = "lost"    // Mono: when noticed; Token, Err says how
)

// Event is one line of a holder's stdout. Times are CLOCK_MONOTONIC
// readings (history.Mono), comparable across processes on one machine.
type Event struct {
	Ev        string `json:"ev"`
	Mono      int64  `json:"mono"`
	End       int64  `json:"end,omitempty"`
	Token     int64  `json:"token,omitempty"`
	Key       string `json:"key,omitempty"`
	Committed bool   `json:"committed,omitempty"`
	Rev       int64  `json:"rev,omitempty"`
	Err       string `json:"err,omitempty"`
}

// Config is a holder's flags.
type Config struct {
	Mode       string        // Naive or Library
	Endpoints  []string      // corenode client addresses
	Prefix     string        // election prefix
	Name       string        // campaign value: names this holder to the workload
	TTL        time.Duration // session lease TTL
	ActEvery   time.Duration
	WriteEvery time.Duration
	Register   string // key of the fenced writes
	// ClockFile, if set, is a rate file (internal/rateclock): a library
	// holder measures its lease on a clock running at the rate in it, which
	// the clock-rate fault changes. The naive holder's clientv3 session has
	// no clock to give it; it runs at the real rate.
	ClockFile string

	clock *rateclock.Clock // from ClockFile, made by Main
}

// Args is the command line that runs a holder with cfg (after Command).
func (c Config) Args() []string {
	return []string{
		"-mode", c.Mode, "-endpoints", strings.Join(c.Endpoints, ","), "-prefix", c.Prefix, "-name", c.Name,
		"-ttl", c.TTL.String(), "-act-every", c.ActEvery.String(), "-write-every", c.WriteEvery.String(),
		"-register", c.Register, "-clock-file", c.ClockFile,
	}
}

func parse(args []string) (Config, error) {
	var c Config
	var endpoints string
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.StringVar(&c.Mode, "mode", Naive, "naive (concurrency.Election) or library (client/election)")
	fs.StringVar(&endpoints, "endpoints", "", "comma-separated client addresses")
	fs.StringVar(&c.Prefix, "prefix", "", "election prefix")
	fs.StringVar(&c.Name, "name", "", "campaign value")
	fs.DurationVar(&c.TTL, "ttl", 2*time.Second, "session TTL (whole seconds)")
	fs.DurationVar(&c.ActEvery, "act-every", 5*time.Millisecond, "time between actions while leading")
	fs.DurationVar(&c.WriteEvery, "write-every", 20*time.Millisecond, "time between fenced writes while leading")
	fs.StringVar(&c.Register, "register", "", "key the fenced writes put")
	fs.StringVar(&c.ClockFile, "clock-file", "", "rate file of the library holder's clock (internal/rateclock); \"\": the real clock")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.Endpoints = strings.Split(endpoints, ",")
	if endpoints == "" || c.Prefix == "" || c.Name == "" || c.Register == "" {
		return c, errors.New("holder: -endpoints, -prefix, -name and -register are required")
	}
	if _, ok := modes[c.Mode]; !ok {
		return c, fmt.Errorf("holder: unknown -mode %q", c.Mode)
	}
	if c.TTL < time.Second || c.TTL%time.Second != 0 {
		return c, fmt.Errorf("holder: -ttl %v: whole seconds, at least 1", c.TTL)
	}
	return c, nil
}

// leadership is what a holder needs of either way of electing.
type leadership interface {
	// leading is the token and whether the holder may act now.
	leading() (int64, bool)
	// done is closed once the holder knows (or, for the naive holder,
	// has been told) that it no longer leads.
	done() <-chan struct{}
	key() string
	// fencedWrite puts value at key only if the election key still exists
	// with the holder's token as its create revision.
	fencedWrite(ctx context.Context, key, value string) (committed bool, rev int64, err error)
	resign(ctx context.Context) error
}

// campaignFunc blocks until the holder leads, ctx is done or the holder's
// session is gone.
type campaignFunc func(ctx context.Context, cli *clientv3.Client, cfg Config, log *slog.Logger) (leadership, error)

// modes are the ways of electing, by name (each file registers its own).
var modes = map[string]campaignFunc{Naive: campaignNaive}

// Modes is the names of the ways of electing this binary has.
func Modes() []string {
	var out []string
	for _, m := range []string{Library, Naive} {
		if _, ok := modes[m]; ok {
			out = append(out, m)
		}
	}
	return out
}

// Main runs a holder with the arguments after Command and returns its exit
// status. Logs go to stderr, events to stdout.
func Main(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := parse(args)
	if err != nil {
		log.Error("holder", "err", err)
		return ExitError
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if cfg.ClockFile != "" {
		cfg.clock, err = rateclock.FromEnv(ctx, "file:"+cfg.ClockFile, func(err error) { log.Error("holder clock", "err", err) })
		if err != nil {
			log.Error("holder", "err", err)
			return ExitError
		}
	}
	cli, err := cluster.NewClient(cfg.Endpoints)
	if err != nil {
		log.Error("holder", "err", err)
		return ExitError
	}
	defer cli.Close()
	h := &holder{cfg: cfg, cli: cli, log: log.With("name", cfg.Name), out: json.NewEncoder(os.Stdout)}
	return h.run(ctx)
}

type holder struct {
	cfg Config
	cli *clientv3.Client
	log *slog.Logger

	mu  sync.Mutex // one line at a time on stdout
	out *json.Encoder
}

func (h *holder) emit(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.out.Encode(ev); err != nil {
		// The workload reading our stdout is gone: so is the run.
		h.log.Error("stdout", "err", err)
		os.Exit(ExitError)
	}
}

func (h *holder) run(ctx context.Context) int {
	start := history.Mono()
	l, err := modes[h.cfg.Mode](ctx, h.cli, h.cfg, h.log)
	if err != nil {
		if ctx.Err() != nil {
			return ExitResigned
		}
		h.log.Error("campaign", "err", err)
		return ExitError
	}
	token, _ := l.leading()
	h.emit(Event{Ev: EvElected, Mono: start, End: history.Mono(), Token: token, Key: l.key()})
	h.log.Info("elected", "token", token, "key", l.key())

	lost := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		h.writer(l, lost)
	}()
	why := h.act(ctx, l)
	close(lost)
	<-writerDone
	if ctx.Err() != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		err := l.resign(rctx)
		h.emit(Event{Ev: EvLost, Mono: history.Mono(), Token: token, Err: fmt.Sprintf("resigned: %v", err)})
		return ExitResigned
	}
	h.emit(Event{Ev: EvLost, Mono: history.Mono(), Token: token, Err: why})
	h.log.Info("lost leadership", "token", token, "why", why)
	return ExitLost
}

// act acts every ActEvery while the leadership says so and returns why it
// stopped. The time of an action is read before the check: an action
// "happens" at an instant, and the check that follows it covers that
// instant, since leadership once lost does not come back. Read after, a
// pause between check and reading would stamp the action late.
func (h *holder) act(ctx context.Context, l leadership) string {
	t := time.NewTicker(h.cfg.ActEvery)
	defer t.Stop()
	for {
		at := history.Mono()
		token, ok := l.leading()
		if !ok {
			return "leading() turned false"
		}
		h.emit(Event{Ev: EvAct, Mono: at, Token: token})
		select {
		case <-ctx.Done():
			return "stopped"
		case <-l.done():
			return "done closed"
		case <-t.C:
		}
	}
}

// writer makes a fenced write every WriteEvery while leading, one at a
// time, until lost is closed. Its own goroutine, so that a write stuck on
// a faulty cluster does not hold back the actions the checker times.
func (h *holder) writer(l leadership, lost <-chan struct{}) {
	t := time.NewTicker(h.cfg.WriteEvery)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-lost:
			return
		case <-t.C:
		}
		sent := history.Mono()
		token, ok := l.leading()
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		committed, rev, err := l.fencedWrite(ctx, h.cfg.Register, fmt.Sprintf("%s token=%d n=%d", h.cfg.Name, token, n))
		cancel()
		ev := Event{Ev: EvWrite, Mono: sent, End: history.Mono(), Token: token, Committed: committed, Rev: rev}
		if err != nil {
			ev.Err = err.Error()
		}
		h.emit(ev)
	}
}

// ReadEvents decodes a holder's stdout, calling f for each event, until
// r ends.
func ReadEvents(r io.Reader, f func(Event)) error {
	dec := json.NewDecoder(r)
	for {
		var ev Event
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("holder: decode event: %w", err)
		}
		f(ev)
	}
}

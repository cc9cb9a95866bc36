// Package nemesis injects faults into a cluster on a schedule and records
// each one, with the interval it was in effect, in the history.
package nemesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/test/jepsen-lite/internal/cluster"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// Kind is a kind of fault.
type Kind string

// The faults. Pauses are sized against the election timeout and the
// longest lease TTL given in Config.
const (
	KillLeader    Kind = "kill-leader"    // SIGKILL the leader, restart it after a while
	KillFollower  Kind = "kill-follower"  // SIGKILL a follower, restart it after a while
	PauseLeader   Kind = "pause-leader"   // SIGSTOP the leader longer than the election timeout
	PauseLong     Kind = "pause-long"     // SIGSTOP a member longer than the longest lease TTL
	IsolateLeader Kind = "isolate-leader" // cut the leader from every other member
	Split         Kind = "split"          // random minority | majority
	Bridge        Kind = "bridge"         // two halves that cannot talk, one member that sees both
	Slow          Kind = "slow"           // latency on every peer link
	Lossy         Kind = "lossy"          // peer connections stall and reset at random
	MoveLeader    Kind = "move-leader"    // MoveLeader to a random follower, several times
	PauseHolder   Kind = "pause-holder"   // SIGSTOP the leading election holder of each mode longer than its TTL
	PauseReader   Kind = "pause-reader"   // SIGSTOP a cached-read reader process longer than the read lease
	// ClockRate runs every member's lease clock and every holder's and
	// reader's clock at 1 ± the spread, each its own sign, drawn again
	// every few seconds. It runs beside the other faults for the whole
	// schedule (clock.go), so rates differ while members crash, pause and
	// move leadership.
	ClockRate Kind = "clock-rate"
)

// All is every kind, in the order a full schedule starts from.
var All = []Kind{KillLeader, KillFollower, PauseLeader, PauseLong, IsolateLeader, Split, Bridge, Slow, Lossy, MoveLeader, PauseHolder, PauseReader, ClockRate}

// Holders are the election workload's holder processes, which PauseHolder
// stops; they are clients, not members, so the cluster does not know them.
type Holders interface {
	// PauseLeaders SIGSTOPs the leading holder of each election, waiting
	// up to wait for each to have one, and says which it stopped.
	PauseLeaders(ctx context.Context, wait time.Duration) (string, error)
	// ResumeAll SIGCONTs every holder PauseLeaders stopped.
	ResumeAll(ctx context.Context) error
}

// Readers are the cached-read workload's reader processes, which
// PauseReader stops; clients too, each with its own client/cache.
type Readers interface {
	// PauseOne SIGSTOPs one running reader, the pick-th (modulo) of those
	// running, and says which, with the process number its reads have in
	// the history (0 when none runs and none was stopped).
	PauseOne(ctx context.Context, pick int) (string, int, error)
	// ResumeAll SIGCONTs every reader PauseOne stopped.
	ResumeAll(ctx context.Context) error
}

// Parse reads a comma-separated list of kinds; "all" or "" is All, "none"
// is no faults.
func Parse(s string) ([]Kind, error) {
	switch s {
	case "", "all":
		return All, nil
	case "none":
		return nil, nil
	}
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(f))
		if !slices.Contains(All, k) {
			return nil, fmt.Errorf("nemesis: unknown fault %q (known: %v)", k, All)
		}
		out = append(out, k)
	}
	return out, nil
}

// Config shapes the schedule.
type Config struct {
	Kinds    []Kind
	Seed     uint64
	Election time.Duration // members' --election-timeout
	MaxTTL   time.Duration // the longest lease TTL the workload grants
	// Quiet is the pause between faults, so that clients make progress
	// and the checkers see the cluster recover.
	QuietMin, QuietMax time.Duration
	// Compact shortens every fault to the low end of its range, so that a
	// short run (CI) still gets through every kind.
	Compact bool
	// Holders, if any, are what PauseHolder stops, for longer than
	// HolderTTL: long enough for the lease to expire and a successor to
	// start acting while the paused holder still believes it leads.
	Holders   Holders
	HolderTTL time.Duration
	// Readers, if any, are what PauseReader stops, for longer than
	// ReadLease (the members' --read-lease-duration): long enough for every
	// lease the reader holds to run out, and for writes of its keys, which
	// wait for it, to go through meanwhile.
	Readers   Readers
	ReadLease time.Duration
	// ClockFiles are the rate files (internal/rateclock) of the holder and
	// reader processes, by name; the members' come from the cluster
	// (cluster.ClockFile). ClockRate sets them to 1 ± ClockSpread, one
	// draw each, every ClockEvery (a range).
	ClockFiles                   map[string]string
	ClockSpread                  float64
	ClockEveryMin, ClockEveryMax time.Duration
}

// Nemesis injects faults into one cluster.
type Nemesis struct {
	c         cluster.Cluster
	clients   []*clientv3.Client
	endpoints []string
	rec       *history.Recorder
	log       *slog.Logger
	cfg       Config
	rng       *rand.Rand
	skipped   []Kind

	mu     sync.Mutex
	counts map[Kind]int
	total  int
}

// New makes a nemesis; kinds the cluster cannot inject are dropped with a
// warning (see Supported and Skipped).
func New(c cluster.Cluster, clients []*clientv3.Client, endpoints []string, rec *history.Recorder, log *slog.Logger, cfg Config) *Nemesis {
	n := &Nemesis{c: c, clients: clients, endpoints: endpoints, rec: rec, log: log, cfg: cfg,
		rng: rand.New(rand.NewPCG(cfg.Seed, 0xfa17)), counts: map[Kind]int{}}
	var kinds []Kind
	for _, k := range cfg.Kinds {
		if n.Supported(k) {
			kinds = append(kinds, k)
		} else {
			log.Warn("fault not supported by this cluster, skipped", "fault", k)
			n.skipped = append(n.skipped, k)
		}
	}
	n.cfg.Kinds = kinds
	return n
}

// Skipped is the selected kinds this cluster cannot inject.
func (n *Nemesis) Skipped() []Kind { return n.skipped }

// Kinds is the faults this nemesis will inject.
func (n *Nemesis) Kinds() []Kind { return n.cfg.Kinds }

// Supported says whether the cluster can inject k.
func (n *Nemesis) Supported(k Kind) bool {
	caps := n.c.Caps()
	switch k {
	case Bridge:
		return caps.PairCuts
	case Split:
		return caps.PairCuts || n.c.Size() <= 3
	case Slow:
		return caps.Slow
	case Lossy:
		return caps.Lossy
	case PauseHolder:
		return n.cfg.Holders != nil
	case PauseReader:
		return n.cfg.Readers != nil
	case ClockRate:
		return caps.ClockRate && n.cfg.ClockSpread > 0
	}
	return true
}

// Counts is how many faults of each kind were injected.
func (n *Nemesis) Counts() (map[Kind]int, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.counts), n.total
}

// Run injects faults until ctx is done: every kind once in a random order,
// then again in another order, so a schedule long enough for one round
// has every kind. A fault in effect when ctx ends is healed at once.
// ClockRate is not in the order: it runs beside it, from start to end.
func (n *Nemesis) Run(ctx context.Context) {
	kinds := n.cfg.Kinds
	if slices.Contains(kinds, ClockRate) {
		kinds = slices.DeleteFunc(slices.Clone(kinds), func(k Kind) bool { return k == ClockRate })
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.clockRates(ctx)
		}()
		defer func() { <-done }()
	}
	if len(kinds) == 0 {
		<-ctx.Done()
		return
	}
	for ctx.Err() == nil {
		order := slices.Clone(kinds)
		n.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, k := range order {
			if !sleep(ctx, n.between(n.cfg.QuietMin, n.cfg.QuietMax)) {
				return
			}
			if err := n.inject(ctx, k); err != nil {
				n.log.Error("fault", "fault", k, "err", err)
			}
		}
	}
}

func (n *Nemesis) between(a, b time.Duration) time.Duration {
	if b <= a {
		return a
	}
	return a + time.Duration(n.rng.Int64N(int64(b-a)))
}

// pick is the normal or, in a compact schedule, the short upper end of a
// range, in milliseconds.
func (n *Nemesis) pick(normal, compact time.Duration) time.Duration {
	if n.cfg.Compact {
		return compact * time.Millisecond
	}
	return normal * time.Millisecond
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// cleanup is a context for healing: it must run even when the run's
// context is done.
func cleanup() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 20*time.Second)
}

// leader asks every member and returns the leader, or -1 if there is none
// after a short wait (the fault then goes to a random member).
func (n *Nemesis) leader(ctx context.Context) (int, []cluster.Status) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		st := cluster.StatusAll(ctx, n.clients, n.endpoints, 700*time.Millisecond)
		if l := cluster.Leader(st); l >= 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return l, st
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (n *Nemesis) followerOf(leader int) int {
	var fs []int
	for i := range n.c.Size() {
		if i != leader {
			fs = append(fs, i)
		}
	}
	return fs[n.rng.IntN(len(fs))]
}

func (n *Nemesis) record(k Kind, start int64, detail string, err error) {
	n.recordProcess(k, start, detail, err, -1)
}

// recordProcess records a fault that stopped a client: process is the
// process number its ops have in the history.
func (n *Nemesis) recordProcess(k Kind, start int64, detail string, err error, process int) {
	op := history.Op{Process: process, Member: -1, Kind: history.KindFault, Start: start, End: n.rec.Clock().Now(),
		Result: history.OK, Detail: string(k) + ": " + detail}
	if err != nil {
		op.Result, op.Error = history.Fail, err.Error()
	}
	n.rec.Add(op)
	n.mu.Lock()
	n.counts[k]++
	n.total++
	n.mu.Unlock()
	n.log.Info("fault", "fault", k, "detail", detail, "for", history.Dur(op.End-start), "err", err)
}

func (n *Nemesis) role(i, leader int) string {
	if leader < 0 {
		return n.c.Name(i) + " (leader unknown)"
	}
	if i == leader {
		return n.c.Name(i) + " (leader)"
	}
	return n.c.Name(i) + " (follower)"
}

func (n *Nemesis) inject(ctx context.Context, k Kind) error {
	leader, st := n.leader(ctx)
	target := leader
	if target < 0 {
		target = n.rng.IntN(n.c.Size())
	}
	start := n.rec.Clock().Now()
	switch k {
	case KillLeader, KillFollower:
		if k == KillFollower {
			target = n.followerOf(leader)
		}
		down := n.between(1500*time.Millisecond, n.pick(3500, 2200))
		err := n.c.Kill(ctx, target)
		if err == nil {
			sleep(ctx, down)
		}
		hctx, cancel := cleanup()
		defer cancel()
		err = errors.Join(err, n.c.Start(hctx, target))
		n.record(k, start, "SIGKILL "+n.role(target, leader)+", restarted", err)
		return err

	case PauseLeader, PauseLong:
		d := n.between(n.cfg.Election+500*time.Millisecond, n.cfg.Election+n.pick(2000, 1000))
		if k == PauseLong {
			// Leader or follower, alternately at random: a paused leader
			// whose clock ran on past every deadline must not act on it.
			if n.rng.IntN(2) == 0 {
				target = n.followerOf(leader)
			}
			d = n.between(n.cfg.MaxTTL+time.Second, n.cfg.MaxTTL+n.pick(2500, 1500))
		}
		err := n.c.Pause(ctx, target)
		if err == nil {
			sleep(ctx, d)
		}
		hctx, cancel := cleanup()
		defer cancel()
		err = errors.Join(err, n.c.Resume(hctx, target))
		n.record(k, start, fmt.Sprintf("SIGSTOP %s for %v", n.role(target, leader), d.Round(time.Millisecond)), err)
		return err

	case IsolateLeader:
		return n.network(ctx, k, start, "isolate "+n.role(target, leader), func() error {
			return n.c.Isolate(ctx, target)
		})

	case Split:
		perm := n.rng.Perm(n.c.Size())
		minority, majority := perm[:(n.c.Size()-1)/2], perm[(n.c.Size()-1)/2:]
		return n.network(ctx, k, start, fmt.Sprintf("minority %s | majority %s (leader %s)",
			n.names(minority), n.names(majority), n.name(leader)), func() error {
			if len(minority) == 1 {
				return n.c.Isolate(ctx, minority[0])
			}
			return n.cutBetween(ctx, minority, majority)
		})

	case Bridge:
		perm := n.rng.Perm(n.c.Size())
		bridge, rest := perm[0], perm[1:]
		a, b := rest[:len(rest)/2], rest[len(rest)/2:]
		return n.network(ctx, k, start, fmt.Sprintf("%s | bridge %s | %s (leader %s)",
			n.names(a), n.c.Name(bridge), n.names(b), n.name(leader)), func() error {
			return n.cutBetween(ctx, a, b)
		})

	case Slow:
		delay := n.between(30*time.Millisecond, 150*time.Millisecond).Round(time.Millisecond)
		jitter := n.between(0, 50*time.Millisecond).Round(time.Millisecond)
		return n.network(ctx, k, start, fmt.Sprintf("every peer link +%v (jitter %v)", delay, jitter), func() error {
			return n.c.Slow(ctx, delay, jitter)
		})

	case Lossy:
		return n.network(ctx, k, start, "every peer link: 2% of chunks stall up to 1.5s, 1% reset", func() error {
			return n.c.Lossy(ctx, 0.02, 1500*time.Millisecond, 0.01)
		})

	case MoveLeader:
		return n.moveLeader(ctx, start, st)

	case PauseHolder:
		d := n.between(n.cfg.HolderTTL+time.Second, n.cfg.HolderTTL+n.pick(2000, 1500))
		which, err := n.cfg.Holders.PauseLeaders(ctx, 3*time.Second)
		detail := "no holder leads, none stopped"
		if which != "" {
			sleep(ctx, d)
			detail = fmt.Sprintf("SIGSTOP %s for %v", which, d.Round(time.Millisecond))
		}
		hctx, cancel := cleanup()
		defer cancel()
		err = errors.Join(err, n.cfg.Holders.ResumeAll(hctx))
		n.record(k, start, detail, err)
		return err

	case PauseReader:
		d := n.between(n.cfg.ReadLease+time.Second, n.cfg.ReadLease+n.pick(2500, 1500))
		which, process, err := n.cfg.Readers.PauseOne(ctx, n.rng.IntN(1<<20))
		detail := "no reader runs, none stopped"
		if process > 0 {
			full := sleep(ctx, d)
			detail = fmt.Sprintf("SIGSTOP %s for %v", which, d.Round(time.Millisecond))
			if !full {
				// The checker judges the pause by its recorded interval.
				detail += " (cut short: the run ended)"
			}
		} else {
			process = -1
		}
		hctx, cancel := cleanup()
		defer cancel()
		err = errors.Join(err, n.cfg.Readers.ResumeAll(hctx))
		n.recordProcess(k, start, detail, err, process)
		return err
	}
	return fmt.Errorf("nemesis: unknown fault %q", k)
}

func (n *Nemesis) name(i int) string {
	if i < 0 {
		return "unknown"
	}
	return n.c.Name(i)
}

func (n *Nemesis) names(is []int) string {
	var s []string
	for _, i := range is {
		s = append(s, n.c.Name(i))
	}
	return strings.Join(s, ",")
}

// Package workload is the clients of a run: register, set, watch and lease
// workers and the monitor, all talking to the cluster through
// go.etcd.io/etcd/client/v3 and recording every operation in the history.
package workload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// Key prefixes. Everything the checkers look at lives under Prefix, which
// the watchers watch; the monitor's canaries live outside it so that they
// do not drown the watch history.
const (
	Prefix      = "jl/"
	RegPrefix   = Prefix + "reg/"
	SetPrefix   = Prefix + "set/"
	LeasePrefix = Prefix + "lease/"
	MarkerKey   = Prefix + "zz-final"
	canaryKey   = "jlmon/canary/"
)

// Env is what every worker shares.
type Env struct {
	Rec       *history.Recorder
	Clock     *history.Clock
	Log       *slog.Logger
	OpTimeout time.Duration
	// Pinned[i] talks to member i only; All round-robins over every member.
	Pinned []*clientv3.Client
	All    *clientv3.Client

	values  atomic.Int64
	process atomic.Int64
}

// NewEnv wires the shared state of the workers.
func NewEnv(rec *history.Recorder, log *slog.Logger, opTimeout time.Duration, pinned []*clientv3.Client, all *clientv3.Client) *Env {
	return &Env{Rec: rec, Clock: rec.Clock(), Log: log, OpTimeout: opTimeout, Pinned: pinned, All: all}
}

// value is unique across the run, so a read names the write it saw.
func (e *Env) value() string { return fmt.Sprint(e.values.Add(1)) }

// NewProcess numbers a logical client; each runs one op at a time, as the
// checkers assume.
func (e *Env) NewProcess() int { return int(e.process.Add(1)) }

// client picks the connection for a process: some are pinned to one member
// (so followers serve and forward), the rest use every member.
func (e *Env) client(process int) (*clientv3.Client, int) {
	if k := process % (len(e.Pinned) + 1); k < len(e.Pinned) {
		return e.Pinned[k], k
	}
	return e.All, -1
}

func (e *Env) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.OpTimeout)
}

// sleep waits d or until ctx is done; false if ctx is done.
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

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// writeResult is how a write that returned err is recorded: a write that
// errs may still have been committed (the answer was lost, the deadline
// passed while the entry was in the log), so it is never a failure.
func writeResult(err error) history.Result {
	if err == nil {
		return history.OK
	}
	return history.Unknown
}

// readResult: a read that errs has no effect, so it is a failure.
func readResult(err error) history.Result {
	if err == nil {
		return history.OK
	}
	return history.Fail
}

// Group runs workers and waits for them.
type Group struct {
	wg sync.WaitGroup
}

// Go runs f in a goroutine of the group.
func (g *Group) Go(f func()) {
	g.wg.Add(1)
	go func() { defer g.wg.Done(); f() }()
}

// Wait waits for every worker of the group.
func (g *Group) Wait() { g.wg.Wait() }

func isCanceled(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

func newRand(seed uint64, process int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(process)*0x9e3779b97f4a7c15+1))
}

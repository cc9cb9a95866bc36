package workload

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// Watcher watches Prefix through one member and, whenever its stream ends
// (the member died, lost its leader, or the watcher hung up on purpose),
// starts again from the last revision it saw plus one.
type Watcher struct {
	env     *Env
	member  int
	process int

	mu     sync.Mutex
	marker chan struct{} // closed when the marker key's event arrives
	closed bool
}

// NewWatcher is a watcher through member i.
func NewWatcher(e *Env, member int) *Watcher {
	return &Watcher{env: e, member: member, process: e.NewProcess(), marker: make(chan struct{})}
}

// Marker is closed once the watcher has seen MarkerKey written.
func (w *Watcher) Marker() <-chan struct{} { return w.marker }

// Member is the member this watcher watches through.
func (w *Watcher) Member() int { return w.member }

// Run watches until ctx is done.
func (w *Watcher) Run(ctx context.Context, seed uint64) {
	e := w.env
	cli := e.Pinned[w.member]
	rng := newRand(seed, w.process)
	next := int64(1)
	for ctx.Err() == nil {
		// RequireLeader: a member cut off from the leader ends the stream
		// instead of going quiet, which exercises the resume path.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		// Hanging up at random exercises resuming from a revision while
		// no fault is in effect, too.
		hangup := time.AfterFunc(time.Duration(2000+rng.IntN(6000))*time.Millisecond, cancel)
		e.Rec.Add(history.Op{Process: w.process, Member: w.member, Kind: history.KindWatchOp,
			Key: Prefix, Rev: next, Start: e.Clock.Now(), End: e.Clock.Now(), Result: history.OK})
		var endErr error
		for resp := range cli.Watch(wctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(next)) {
			if err := resp.Err(); err != nil {
				endErr = err
			}
			for _, ev := range resp.Events {
				now := e.Clock.Now()
				op := eventOp(ev, now)
				op.Process, op.Member, op.Kind = w.process, w.member, history.KindWatch
				e.Rec.Add(op)
				if ev.Kv.ModRevision >= next {
					next = ev.Kv.ModRevision + 1
				}
				if string(ev.Kv.Key) == MarkerKey {
					w.sawMarker()
				}
			}
		}
		hangup.Stop()
		cancel()
		e.Rec.Add(history.Op{Process: w.process, Member: w.member, Kind: history.KindWatchEnd,
			Rev: next, Start: e.Clock.Now(), End: e.Clock.Now(), Result: history.OK, Error: errString(endErr)})
		if !sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
}

func (w *Watcher) sawMarker() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.marker)
	}
}

func eventOp(ev *clientv3.Event, now int64) history.Op {
	op := history.Op{Key: string(ev.Kv.Key), Rev: ev.Kv.ModRevision, Start: now, End: now, Result: history.OK}
	switch ev.Type {
	case mvccpb.PUT:
		op.Event, op.Value, op.Lease = "put", string(ev.Kv.Value), ev.Kv.Lease
	case mvccpb.DELETE:
		op.Event = "delete"
	}
	return op
}

// FullHistory reads every event under Prefix from revision 1 through
// member i, up to the marker, with a fresh watch: the reference the
// resuming watchers are compared with, and each member with the others.
func FullHistory(ctx context.Context, e *Env, member int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	process := e.NewProcess()
	var n int
	for resp := range e.Pinned[member].Watch(ctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(1)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("workload: full history through member %d: %w", member, err)
		}
		for _, ev := range resp.Events {
			op := eventOp(ev, e.Clock.Now())
			op.Process, op.Member, op.Kind = process, member, history.KindHistory
			e.Rec.Add(op)
			n++
			if string(ev.Kv.Key) == MarkerKey {
				return nil
			}
		}
	}
	return fmt.Errorf("workload: full history through member %d: no marker after %d events: %w", member, n, ctx.Err())
}

// WriteMarker puts MarkerKey once every other write has stopped, so that a
// watcher that sees it has seen everything before it.
func WriteMarker(ctx context.Context, e *Env) (int64, error) {
	var last error
	for range 10 {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		op := history.Op{Process: 0, Member: -1, Kind: history.KindPut, Key: MarkerKey, Value: e.value()}
		op.Start = e.Clock.Now()
		resp, err := e.All.Put(octx, MarkerKey, op.Value)
		op.End = e.Clock.Now()
		cancel()
		op.Result, op.Error = writeResult(err), errString(err)
		if err == nil {
			op.Rev = resp.Header.Revision
		}
		op.Kind = history.KindFinal
		e.Rec.Add(op)
		if err == nil {
			return op.Rev, nil
		}
		last = err
		if !sleep(ctx, time.Second) {
			break
		}
	}
	return 0, fmt.Errorf("workload: write the final marker: %w", last)
}

package nemesis

// Network faults: cutting members off from each other, healing every cut,
// and moving the leadership.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/corenode/corenode/test/jepsen-lite/internal/cluster"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

func (n *Nemesis) cutBetween(ctx context.Context, a, b []int) error {
	var errs []error
	for _, x := range a {
		for _, y := range b {
			errs = append(errs, n.c.Cut(ctx, x, y))
		}
	}
	return errors.Join(errs...)
}

// network holds a network fault for 3-5 s (2-3 s compact), then heals it.
func (n *Nemesis) network(ctx context.Context, k Kind, start int64, detail string, apply func() error) error {
	err := apply()
	if err == nil {
		sleep(ctx, n.between(n.pick(3000, 2000), n.pick(5000, 3000)))
	}
	hctx, cancel := cleanup()
	defer cancel()
	err = errors.Join(err, n.c.HealNetwork(hctx))
	n.record(k, start, detail, err)
	return err
}

// moveLeader moves leadership to a random follower 3-5 times, about a
// second apart: leases must neither expire early nor live on forever.
func (n *Nemesis) moveLeader(ctx context.Context, start int64, st []cluster.Status) error {
	moves := 3
	if !n.cfg.Compact {
		moves += n.rng.IntN(3)
	}
	var done []string
	var errs []error
	for m := range moves {
		if m > 0 {
			if !sleep(ctx, n.between(700*time.Millisecond, 1500*time.Millisecond)) {
				break
			}
			_, st = n.leader(ctx)
		}
		leader := cluster.Leader(st)
		if leader < 0 {
			errs = append(errs, errors.New("no leader to move"))
			continue
		}
		to := n.followerOf(leader)
		if st[to].ID == 0 {
			errs = append(errs, fmt.Errorf("no ID for %s", n.c.Name(to)))
			continue
		}
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t0 := n.rec.Clock().Now()
		_, err := n.clients[leader].MoveLeader(mctx, st[to].ID)
		cancel()
		op := history.Op{Process: -1, Member: leader, Kind: history.KindFault, Start: t0, End: n.rec.Clock().Now(),
			Result: history.OK, Detail: fmt.Sprintf("move-leader step: %s -> %s", n.c.Name(leader), n.c.Name(to))}
		step := n.c.Name(leader) + "->" + n.c.Name(to)
		if err != nil {
			op.Result, op.Error = history.Fail, err.Error()
			errs = append(errs, err)
			step += "(failed)"
		}
		n.rec.Add(op)
		done = append(done, step)
	}
	err := errors.Join(errs...)
	n.record(MoveLeader, start, strings.Join(done, " "), err)
	return err
}

// HealAll undoes every fault that may still be in effect: resumes and
// starts every member and heals the network. The run calls it before the
// final checks whatever the nemesis was doing.
func HealAll(c cluster.Cluster) error {
	ctx, cancel := cleanup()
	defer cancel()
	var errs []error
	errs = append(errs, c.HealNetwork(ctx))
	for i := range c.Size() {
		if err := c.Resume(ctx, i); err != nil && !errors.Is(err, cluster.ErrNotRunning) {
			errs = append(errs, err)
		}
		errs = append(errs, c.Start(ctx, i))
	}
	return errors.Join(errs...)
}

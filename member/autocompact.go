package member

import (
	"context"
	"errors"
	"log/slog"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/kv"
)

// AutoCompaction is etcd's --auto-compaction-mode and
// --auto-compaction-retention: the leader compacts the history by itself.
type AutoCompaction struct {
	// Periodic keeps this much history (etcd's periodic mode): every
	// Periodic, or every hour if that is shorter, the leader compacts to the
	// revision it saw Periodic ago. Zero: off.
	Periodic time.Duration
	// Revisions keeps this many revisions (etcd's revision mode): every
	// RevisionEvery (zero: etcd's 5 minutes) the leader compacts to the
	// current revision minus Revisions. Zero: off.
	Revisions     int64
	RevisionEvery time.Duration
}

// autoCompactor is the leader-only service that compacts as
// AutoCompaction asks. A new leader starts its samples afresh, as etcd's
// compactor does, so a leader change delays the next periodic compaction
// by up to Periodic; it never compacts more than asked.
type autoCompactor struct {
	cfg     AutoCompaction
	revs    func() (rev, compacted int64)
	compact func(ctx context.Context, rev int64) error
	log     *slog.Logger
}

type revSample struct {
	at  time.Time
	rev int64
}

// periodicTarget is the revision to compact to at now, keeping keep of
// history: the newest sample at least keep old (0 if none), and the
// samples still needed later.
func periodicTarget(samples []revSample, now time.Time, keep time.Duration) (int64, []revSample) {
	var target int64
	i := 0
	for ; i < len(samples) && !samples[i].at.After(now.Add(-keep)); i++ {
		target = samples[i].rev
	}
	if i > 0 {
		// The last sample old enough stays: it is the target until a newer
		// one is old enough.
		i--
	}
	return target, samples[i:]
}

func (a *autoCompactor) Run(ctx context.Context, _ uint64) {
	if a.cfg.Periodic > 0 {
		a.runPeriodic(ctx)
		return
	}
	every := a.cfg.RevisionEvery
	if every <= 0 {
		every = 5 * time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rev, compacted := a.revs()
		if target := rev - a.cfg.Revisions; target > compacted {
			a.do(ctx, "revision", target)
		}
	}
}

func (a *autoCompactor) runPeriodic(ctx context.Context) {
	interval := min(a.cfg.Periodic, time.Hour)
	// As etcd: ten samples an interval.
	t := time.NewTicker(max(interval/10, time.Millisecond))
	defer t.Stop()
	rev, _ := a.revs()
	samples := []revSample{{time.Now(), rev}}
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		rev, compacted := a.revs()
		samples = append(samples, revSample{now, rev})
		if now.Sub(last) < interval {
			continue
		}
		var target int64
		target, samples = periodicTarget(samples, now, a.cfg.Periodic)
		if target > compacted {
			a.do(ctx, "periodic", target)
			last = now
		}
	}
}

func (a *autoCompactor) do(ctx context.Context, mode string, rev int64) {
	a.log.Info("starting auto "+mode+" compaction", "revision", rev)
	start := time.Now()
	if err := a.compact(ctx, rev); err != nil {
		if !errors.Is(err, kv.ErrCompacted) && ctx.Err() == nil {
			a.log.Warn("failed auto "+mode+" compaction", "revision", rev, "err", err)
		}
		return
	}
	a.log.Info("completed auto "+mode+" compaction", "revision", rev, "took", time.Since(start))
}

func newAutoCompactor(cfg AutoCompaction, m *Member, log *slog.Logger) *autoCompactor {
	return &autoCompactor{
		cfg: cfg,
		revs: func() (int64, int64) {
			s := m.node.FSM().Store()
			return s.Rev(), s.CompactRev()
		},
		compact: func(ctx context.Context, rev int64) error {
			_, err := m.request.Compact(ctx, &pb.CompactionRequest{Revision: rev})
			return err
		},
		log: log,
	}
}

package checkpoint

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/corenode/corenode/lease"
)

// Proposer is what the scheduler needs of its member. Each call blocks
// until the entry is committed and applied on this member, or fails.
type Proposer interface {
	ProposeCheckpoint(ctx context.Context, c *lease.Checkpoint) error
	ProposeExpire(ctx context.Context, e *lease.Expire) error
	// PromoteLeases calls fn with the replicated lease state while no lease
	// entry applies.
	PromoteLeases(fn func(clock int64, leases []lease.Lease))
}

// Config tunes the scheduler.
type Config struct {
	// Tick is how often the leader advances the lease clock while any lease
	// is checkpointed, and looks for leases due for a checkpoint. It bounds
	// how much a leader change extends a checkpointed lease.
	Tick time.Duration
	// MaxBatch bounds the leases in one checkpoint or expiry entry.
	MaxBatch int
}

// Scheduler drives the tracker while its member leads.
type Scheduler struct {
	tr  *lease.Tracker
	p   Proposer
	cfg Config
	log *slog.Logger
	m   *Metrics

	flush chan struct{}

	mu   sync.Mutex
	done uint64 // highest checkpoint seq applied
	// failed holds the most recent batches that did not apply, each by
	// its seq: a later batch applying says nothing of an earlier one that
	// failed (its resets are lost), so a waiter needs its own batch's fate,
	// not a high-water mark. Waiters live a request timeout, failures come
	// with lost proposals and ended terms: the last maxFailed are plenty.
	failed  []uint64
	changed chan struct{} // closed and replaced when done or failed moves, or an expiry applies
}

// maxFailed bounds Scheduler.failed.
const maxFailed = 256

// New returns a scheduler over tr.
func New(tr *lease.Tracker, p Proposer, cfg Config, m *Metrics, logger *slog.Logger) *Scheduler {
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1000
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Scheduler{tr: tr, p: p, cfg: cfg, m: m, log: logger, flush: make(chan struct{}, 1), changed: make(chan struct{})}
}

// AwaitCheckpoint returns once checkpoint batch seq (a lease.Renewal's
// ResetSeq) has settled: true once its entry committed and applied, false
// if its proposal failed or the term ended before it was proposed. The
// batch is proposed at once, not at the next tick, since a keep-alive
// waits for it.
func (s *Scheduler) AwaitCheckpoint(ctx context.Context, seq uint64) (bool, error) {
	select {
	case s.flush <- struct{}{}:
	default:
	}
	for {
		s.mu.Lock()
		done, failed, changed := s.done, slices.Contains(s.failed, seq), s.changed
		s.mu.Unlock()
		switch {
		case failed:
			return false, nil
		case done >= seq:
			return true, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// AwaitExpiry returns once lease id, whose time is up, has left the
// tracker: true if its expiry (or a revoke) applied, false if leadership
// was lost first (the tracker was demoted and forgot every lease).
func (s *Scheduler) AwaitExpiry(ctx context.Context, id int64) (bool, error) {
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if _, _, ok := s.tr.Remaining(id); !ok {
			return s.tr.Active(), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

func (s *Scheduler) settle(seq uint64, ok bool) {
	s.mu.Lock()
	if ok {
		s.done = max(s.done, seq)
	} else {
		if len(s.failed) == maxFailed {
			s.failed = s.failed[1:]
		}
		s.failed = append(s.failed, seq)
	}
	s.wakeLocked()
	s.mu.Unlock()
}

// wakeLocked wakes every caller of AwaitCheckpoint and AwaitExpiry.
func (s *Scheduler) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Run implements node.LeaderService.
//
// All its time comes from the tracker's clock: it sleeps on one timer until
// the next tick or the earliest deadline, whichever comes first, so it
// wakes once per tick, per deadline and per keep-alive that needs a reset,
// and a test that steps a fake clock decides every wake-up.
func (s *Scheduler) Run(ctx context.Context, term uint64) {
	s.p.PromoteLeases(s.tr.Promote)
	defer func() {
		// Demote uses up the number of the batch this term would have taken
		// next, the one pending resets wait for: it failed. (Every batch
		// taken before has settled: they are proposed from this goroutine.)
		s.settle(s.tr.Demote(), false)
	}()
	s.log.Info("lease scheduler started", "term", term, "leases", s.tr.Len())
	clock := s.tr.Clock()
	tick := clock.Now().Add(s.cfg.Tick)
	flushed := false
	for {
		s.expire(ctx)
		if now := clock.Now(); flushed || !now.Before(tick) {
			if !now.Before(tick) {
				// As a runtime ticker does, ticks keep their phase, and a
				// slow checkpoint skips the ticks it overran rather than
				// bunching them.
				tick = tick.Add((now.Sub(tick)/s.cfg.Tick + 1) * s.cfg.Tick)
			}
			s.checkpoint(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		wake := tick
		if next, ok := s.tr.NextDeadline(); ok && next.Before(wake) {
			wake = next
		}
		t := clock.NewTimer(wake.Sub(clock.Now()))
		flushed = false
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-s.flush:
			flushed = true
		}
		// Stopped before any work, so while the scheduler works it holds no
		// timer and while it waits exactly one: tests read that as "idle".
		t.Stop()
	}
}

// expire proposes every lease already due, in batches.
func (s *Scheduler) expire(ctx context.Context) {
	clock := s.tr.Clock()
	for ctx.Err() == nil {
		ids := s.tr.Expired(s.cfg.MaxBatch)
		if len(ids) == 0 {
			return
		}
		deadlines := s.tr.Deadlines(ids)
		if err := s.p.ProposeExpire(ctx, &lease.Expire{IDs: ids}); err != nil {
			s.tr.Unexpire(ids)
			if ctx.Err() == nil {
				s.log.Warn("lease expiry proposal failed, will retry", "leases", len(ids), "err", err)
				s.sleep(ctx, expireRetry)
			}
			return
		}
		s.mu.Lock()
		s.wakeLocked() // AwaitExpiry of these leases may return now
		s.mu.Unlock()
		s.m.Expired.Add(float64(len(ids)))
		now := clock.Now()
		for _, d := range deadlines {
			if !d.IsZero() {
				s.m.ExpiryLag.Observe(now.Sub(d).Seconds())
			}
		}
	}
}

// expireRetry is how long the scheduler waits after a failed expiry
// proposal before it tries again, so a failing raft is not hammered.
const expireRetry = 50 * time.Millisecond

// sleep waits d on the tracker's clock, or until ctx ends.
func (s *Scheduler) sleep(ctx context.Context, d time.Duration) {
	t := s.tr.Clock().NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

// checkpoint proposes checkpoint batches until nothing is due. Batches are
// proposed one after another from this goroutine, so a reset always
// applies after the checkpoint it undoes.
func (s *Scheduler) checkpoint(ctx context.Context) {
	for ctx.Err() == nil {
		c, seq := s.tr.TakeCheckpoint(s.cfg.MaxBatch)
		if c == nil {
			return
		}
		err := s.p.ProposeCheckpoint(ctx, c)
		s.settle(seq, err == nil)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("lease checkpoint proposal failed", "err", err)
			}
			return
		}
		s.m.CheckpointEntries.Inc()
		s.m.CheckpointBytes.Add(float64(c.Size()))
		if len(c.Expiries) < s.cfg.MaxBatch {
			return
		}
	}
}

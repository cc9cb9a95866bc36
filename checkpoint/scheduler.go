// Package checkpoint is the leader-only scheduler that turns the lease
// tracker's due work into batched proposals: checkpoints of remaining TTLs
// (with the lease clock and keep-alive resets), and expirations.
//
// It runs only while its member leads (node.LeaderService): it starts after
// the leader's barrier, so the tracker is built from an FSM that holds every
// earlier entry, and it stops proposing the moment leadership is lost.
package checkpoint

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/corenode/corenode/lease"
)

// Proposer is what the scheduler needs of its member. Each call blocks
// until the entry is committed and applied on this member, or fails.
type Proposer interface {
	ProposeCheckpoint(ctx context.Context, c *lease.Checkpoint) error
	ProposeExpire(ctx context.Context, e *lease.Expire) error
	// ConfirmLeadership returns once a quorum has confirmed, after the call
	// began, that this member leads.
	ConfirmLeadership(ctx context.Context) error
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

	mu      sync.Mutex
	done    uint64        // highest checkpoint seq applied
	failed  uint64        // highest checkpoint seq whose proposal failed
	changed chan struct{} // closed and replaced when done or failed moves, or an expiry applies
}

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

// ErrNotLeader means the keep-alive reached a member that does not lead.
var ErrNotLeader = errors.New("checkpoint: not the leader")

// Renew handles a keep-alive on the leader and returns the TTL the holder
// may rely on from when it sent the request (zero: the lease is gone).
//
// Rule 2 of package lease: leadership is confirmed by a quorum after the
// request arrived and before the deadline moves, so a deposed leader never
// acknowledges a keep-alive that the next leader would not honour. Rule 1:
// a lease checkpointed since its last keep-alive is reset in a committed
// entry before the answer. A lease whose time is up is not renewed, and
// the zero answer waits until its expiry applies (awaitExpiry).
func (s *Scheduler) Renew(ctx context.Context, id int64) (int64, error) {
	if err := s.p.ConfirmLeadership(ctx); err != nil {
		return 0, err
	}
	r := s.tr.Renew(id)
	if r.Inactive {
		// Leadership was lost after it was confirmed: the next leader
		// decides, so the holder must not hear "gone" from this one.
		return 0, ErrNotLeader
	}
	s.m.KeepAlives.Inc()
	if r.Due {
		return 0, s.awaitExpiry(ctx, id)
	}
	if r.ResetSeq == 0 {
		return r.TTL, nil
	}
	select {
	case s.flush <- struct{}{}:
	default:
	}
	for {
		s.mu.Lock()
		done, failed, changed := s.done, s.failed, s.changed
		s.mu.Unlock()
		switch {
		case done >= r.ResetSeq:
			return r.TTL, nil
		case failed >= r.ResetSeq:
			return 0, ErrNotLeader
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// awaitExpiry returns once lease id, whose time is up, has left the
// tracker: nil if its expiry (or a revoke) applied, ErrNotLeader if
// leadership was lost first. As etcd's lessor does, the holder hears "gone"
// only when the lease is gone from the state everyone reads, so nothing it
// reads afterwards shows the lease still there.
func (s *Scheduler) awaitExpiry(ctx context.Context, id int64) error {
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if _, _, ok := s.tr.Remaining(id); !ok {
			if !s.tr.Active() {
				return ErrNotLeader
			}
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Scheduler) settle(seq uint64, ok bool) {
	s.mu.Lock()
	if ok {
		s.done = max(s.done, seq)
	} else {
		s.failed = max(s.failed, seq)
	}
	s.wakeLocked()
	s.mu.Unlock()
}

// wakeLocked wakes every keep-alive waiting on the scheduler.
func (s *Scheduler) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Metrics are the scheduler's series, shared with the Lease service.
func (s *Scheduler) Metrics() *Metrics { return s.m }

// Run implements node.LeaderService.
//
// All its time comes from the tracker's clock: it sleeps on one timer until
// the next tick or the earliest deadline, whichever comes first, so it
// wakes once per tick, per deadline and per keep-alive that needs a reset,
// and a test that steps a fake clock decides every wake-up.
func (s *Scheduler) Run(ctx context.Context, term uint64) {
	s.p.PromoteLeases(s.tr.Promote)
	defer func() {
		s.tr.Demote()
		// Wake keep-alives waiting on batches this term will not propose.
		s.settle(s.tr.Seq(), false)
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
		s.wakeLocked() // keep-alives of these leases may answer now
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

package checkpoint

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/corenode/corenode/lease"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeProposer applies proposals to a lease table, as the FSM would, and
// records them.
type fakeProposer struct {
	mu          sync.Mutex
	table       *lease.Table
	tr          *lease.Tracker
	checkpoints []*lease.Checkpoint
	expired     []int64
	leading     bool
	// expireGate, if set, holds every expiry proposal until it is closed
	// or the proposal's context ends.
	expireGate chan struct{}
}

func (p *fakeProposer) ProposeCheckpoint(ctx context.Context, c *lease.Checkpoint) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.leading {
		return errors.New("not leader")
	}
	p.table.Apply(c)
	p.checkpoints = append(p.checkpoints, c)
	return nil
}

func (p *fakeProposer) ProposeExpire(ctx context.Context, e *lease.Expire) error {
	p.mu.Lock()
	gate := p.expireGate
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.leading {
		return errors.New("not leader")
	}
	for _, id := range e.IDs {
		p.table.Revoke(id)
		p.tr.Removed(id)
	}
	p.expired = append(p.expired, e.IDs...)
	return nil
}

func (p *fakeProposer) ConfirmLeadership(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.leading {
		return ErrNotLeader
	}
	return nil
}

func (p *fakeProposer) PromoteLeases(fn func(int64, []lease.Lease)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(p.table.Clock(), p.table.Leases())
}

func (p *fakeProposer) snapshot() (cps int, expired []int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.checkpoints), append([]int64(nil), p.expired...)
}

func (p *fakeProposer) lookup(id int64) (lease.Lease, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.table.Lookup(id)
}

func setup(t *testing.T) (*Scheduler, *fakeProposer, *fakeClock, context.CancelFunc, chan struct{}) {
	clock := &fakeClock{t: time.Unix(100, 0)}
	tr := lease.NewTracker(clock, lease.TrackerConfig{CheckpointAfter: time.Second})
	p := &fakeProposer{table: lease.NewTable(), tr: tr, leading: true}
	p.table.Grant(1, 5)
	p.table.Grant(2, 10)
	s := New(tr, p, Config{Tick: time.Millisecond}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx, 1)
		close(done)
	}()
	waitFor(t, func() bool { return tr.Active() })
	return s, p, clock, cancel, done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSchedulerExpiresDueLeasesOnly(t *testing.T) {
	_, p, clock, cancel, done := setup(t)
	defer func() { cancel(); <-done }()
	clock.advance(5*time.Second - time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if _, exp := p.snapshot(); len(exp) != 0 {
		t.Fatalf("expired %v before the deadline", exp)
	}
	clock.advance(time.Millisecond)
	waitFor(t, func() bool { _, exp := p.snapshot(); return len(exp) == 1 && exp[0] == 1 })
	if _, ok := p.lookup(1); ok {
		t.Fatal("expired lease still in the table")
	}
	if _, ok := p.lookup(2); !ok {
		t.Fatal("wrong lease expired")
	}
}

func TestKeepAliveAfterCheckpointWaitsForCommittedReset(t *testing.T) {
	s, p, clock, cancel, done := setup(t)
	defer func() { cancel(); <-done }()
	clock.advance(1500 * time.Millisecond)
	waitFor(t, func() bool { l, _ := p.lookup(2); return l.Expiry != 0 })
	ttl, err := s.Renew(context.Background(), 2)
	if err != nil || ttl != 10 {
		t.Fatalf("renew: %d %v", ttl, err)
	}
	// Renew returned, so the reset must already be in the replicated table.
	if l, _ := p.lookup(2); l.Expiry != 0 {
		t.Fatalf("keep-alive answered before its reset committed: %+v", l)
	}
}

func TestDemotionStopsAllProposals(t *testing.T) {
	s, p, clock, cancel, done := setup(t)
	cancel()
	<-done
	cps, _ := p.snapshot()
	clock.advance(time.Minute)
	time.Sleep(20 * time.Millisecond)
	if n, exp := p.snapshot(); n != cps || len(exp) != 0 {
		t.Fatalf("a demoted scheduler proposed: %d checkpoints, expired %v", n-cps, exp)
	}
	if _, err := s.Renew(context.Background(), 2); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("renew on a demoted scheduler: %v", err)
	}
}

// A keep-alive of a lease whose time is up answers "gone" only once the
// expiry has applied: before that its keys are still there, and a read
// between the two would see a lease the holder was told is gone.
func TestKeepAliveOfDueLeaseAnswersAfterItsExpiryApplies(t *testing.T) {
	s, p, clock, cancel, done := setup(t)
	defer func() { cancel(); <-done }()
	gate := make(chan struct{})
	p.mu.Lock()
	p.expireGate = gate
	p.mu.Unlock()
	clock.advance(5 * time.Second) // lease 1 (TTL 5) is due
	type answer struct {
		ttl int64
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		ttl, err := s.Renew(context.Background(), 1)
		answered <- answer{ttl, err}
	}()
	select {
	case a := <-answered:
		t.Fatalf("keep-alive answered %+v while the lease's expiry was unapplied", a)
	case <-time.After(50 * time.Millisecond):
	}
	if _, ok := p.lookup(1); !ok {
		t.Fatal("lease 1 left the table with its expiry held")
	}
	close(gate)
	a := <-answered
	if a.ttl != 0 || a.err != nil {
		t.Fatalf("keep-alive of an expired lease: ttl %d err %v, want 0 and nil", a.ttl, a.err)
	}
	if _, ok := p.lookup(1); ok {
		t.Fatal("keep-alive answered gone with the lease still in the table")
	}
}

// If leadership goes while such a keep-alive waits, it fails as "not
// leader", so the client asks the next leader instead of hearing "gone"
// from one that could not make it so.
func TestKeepAliveOfDueLeaseFailsOnDemotion(t *testing.T) {
	s, p, clock, cancel, done := setup(t)
	p.mu.Lock()
	p.expireGate = make(chan struct{}) // never opens
	p.mu.Unlock()
	clock.advance(5 * time.Second)
	answered := make(chan error, 1)
	go func() {
		_, err := s.Renew(context.Background(), 1)
		answered <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	<-done
	select {
	case err := <-answered:
		if !errors.Is(err, ErrNotLeader) {
			t.Fatalf("keep-alive after demotion: %v, want ErrNotLeader", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("keep-alive still waiting 5s after demotion")
	}
}

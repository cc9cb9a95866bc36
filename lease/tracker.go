package lease

import (
	"container/heap"
	"math"
	"sync"
	"time"
)

// TrackerConfig tunes the tracker.
type TrackerConfig struct {
	// CheckpointAfter is how long a lease goes without a keep-alive before
	// its deadline is checkpointed. Until then a new leader would restart it
	// with its full TTL, so this bounds the extension a leader change can
	// give a lease whose holder stopped. Holders that renew more often than
	// this never cost a log entry per keep-alive.
	CheckpointAfter time.Duration
}

// Tracker is the leader's view of lease deadlines. It is inert until
// Promote and after Demote; every method is safe for concurrent use.
//
// Expired never walks unexpired leases: deadlines sit in a min-heap. Leases
// waiting to be checkpointed sit in a FIFO of renewal times, which arrive in
// clock order, so TakeCheckpoint touches only leases that are due.
type Tracker struct {
	mu     sync.Mutex
	clock  Clock
	cfg    TrackerConfig
	active bool

	// The lease clock reads clockBase at clockStart and runs with the
	// monotonic clock from there.
	clockBase  int64
	clockStart time.Time

	epoch        time.Time // instant zero
	byID         map[int64]*entry
	deadlines    entryHeap
	renewals     []renewal // FIFO by renewal time, lazily pruned
	resets       []int64
	checkpointed int
	seq          uint64 // checkpoint batches handed out
}

type entry struct {
	id           int64
	ttl          time.Duration
	deadline     instant
	renewed      instant
	checkpointed bool
	expiring     bool
	index        int // in deadlines; -1 when not there
}

type renewal struct {
	at instant
	id int64
}

// instant is a reading of the tracker's clock in nanoseconds since epoch.
// A million leases each keep a deadline and a renewal time, and this is a
// third of a time.Time.
type instant int64

// NewTracker returns an inactive tracker.
func NewTracker(clock Clock, cfg TrackerConfig) *Tracker {
	if cfg.CheckpointAfter <= 0 {
		cfg.CheckpointAfter = time.Second
	}
	return &Tracker{clock: clock, cfg: cfg, byID: map[int64]*entry{}, epoch: clock.Now()}
}

// Clock is the clock the tracker reads: whoever waits for one of its
// deadlines waits on this clock.
func (t *Tracker) Clock() Clock { return t.clock }

// Promote activates the tracker on a new leader, restarting every deadline
// from the replicated state: a lease never checkpointed gets its whole TTL
// from now and is checkpointed at the next TakeCheckpoint, a checkpointed
// one what its checkpoint left on the lease clock. The caller
// holds the FSM still (no lease entry applies) while this runs.
func (t *Tracker) Promote(leaseClock int64, leases []Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	wall := t.clock.Now()
	now := t.at(wall)
	t.reset()
	t.active = true
	t.clockBase, t.clockStart = leaseClock, wall
	// A lease never checkpointed gets its whole TTL from now: the old
	// leader's last keep-alive is unknown here, and restarting it is never
	// early. It is also due for a checkpoint at once, so the next leader
	// change resumes it rather than granting the whole TTL again; otherwise
	// leadership moving more often than CheckpointAfter would keep a lease
	// whose holder is gone alive forever.
	due := now - instant(t.cfg.CheckpointAfter)
	for _, l := range leases {
		e := &entry{id: l.ID, ttl: seconds(l.TTL), renewed: due, index: -1}
		if l.Expiry == 0 {
			e.deadline = now.plus(e.ttl)
			t.renewals = append(t.renewals, renewal{due, l.ID})
		} else {
			e.deadline = now.plus(time.Duration(l.Expiry-leaseClock) * time.Millisecond)
			e.checkpointed = true
			t.checkpointed++
		}
		t.byID[l.ID] = e
		t.deadlines = append(t.deadlines, e)
	}
	for i, e := range t.deadlines {
		e.index = i
	}
	heap.Init(&t.deadlines)
}

// Demote deactivates the tracker: a deposed leader decides nothing.
//
// It returns the sequence number of the checkpoint batch the term would
// have taken next, now used up: keep-alives whose reset waited for that
// batch (Renewal.ResetSeq) were never replicated, and a batch of a later
// term must not answer for them.
func (t *Tracker) Demote() (lost uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reset()
	t.seq++
	return t.seq
}

func (t *Tracker) reset() {
	t.active = false
	t.byID = map[int64]*entry{}
	t.deadlines = nil
	t.renewals = nil
	t.resets = nil
	t.checkpointed = 0
}

// Active reports whether the tracker decides expiry (this member leads).
func (t *Tracker) Active() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active
}

// Len is the number of leases tracked.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// Granted records a grant as it applies on the leader: its deadline starts
// now, after the grant committed, so it is never earlier than the holder's.
func (t *Tracker) Granted(id, ttl int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return
	}
	if old, ok := t.byID[id]; ok {
		t.remove(old)
	}
	now := t.at(t.clock.Now())
	e := &entry{id: id, ttl: seconds(ttl), deadline: now.plus(seconds(ttl)), renewed: now}
	t.byID[id] = e
	heap.Push(&t.deadlines, e)
	t.renewals = append(t.renewals, renewal{now, id})
}

// Removed records a revoke or expiry as it applies.
func (t *Tracker) Removed(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byID[id]; ok {
		t.remove(e)
	}
}

func (t *Tracker) remove(e *entry) {
	if e.index >= 0 {
		heap.Remove(&t.deadlines, e.index)
	}
	if e.checkpointed {
		t.checkpointed--
	}
	delete(t.byID, e.id)
}

// Renewal is the outcome of a keep-alive.
type Renewal struct {
	// TTL is the TTL granted from now, in seconds; zero if the lease is
	// gone or its time is up (the holder must stop).
	TTL int64
	// Due is set, with a zero TTL, for a lease whose time is up but whose
	// expiry has not applied: its keys are still there, so the holder may
	// hear "gone" only once the expiry has applied, or a read between the
	// two answers would see the lease come back.
	Due bool
	// ResetSeq, when nonzero, is the checkpoint batch that carries this
	// lease's reset: the keep-alive may be acknowledged only once that batch
	// has committed (see the package comment).
	ResetSeq uint64
	// Inactive is set when the tracker was demoted (leadership lost) before
	// the renewal: the TTL says nothing, and the holder must ask the next
	// leader rather than hear that its lease is gone.
	Inactive bool
}

// Renew extends lease id by its TTL from now. The caller has confirmed
// leadership after the request arrived.
func (t *Tracker) Renew(id int64) Renewal {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return Renewal{Inactive: true}
	}
	e, ok := t.byID[id]
	if !ok {
		return Renewal{}
	}
	now := t.at(t.clock.Now())
	if e.expiring || now >= e.deadline {
		// Its time is up even if the expiry is not yet proposed; renewing
		// now would resurrect a lease the holder may already have given up.
		return Renewal{Due: true}
	}
	e.deadline = now.plus(e.ttl)
	heap.Fix(&t.deadlines, e.index)
	e.renewed = now
	t.renewals = append(t.renewals, renewal{now, id})
	r := Renewal{TTL: int64(e.ttl / time.Second)}
	if e.checkpointed {
		e.checkpointed = false
		t.checkpointed--
		t.resets = append(t.resets, id)
		r.ResetSeq = t.seq + 1
	}
	return r
}

// Remaining is lease id's remaining time to live in whole seconds (the
// lease expires in under Remaining+1 seconds) and its granted TTL.
func (t *Tracker) Remaining(id int64) (remaining, granted int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, found := t.byID[id]
	if !t.active || !found {
		return 0, 0, false
	}
	left := time.Duration(e.deadline - t.at(t.clock.Now()))
	if left < 0 || e.expiring {
		left = 0
	}
	return int64(left / time.Second), int64(e.ttl / time.Second), true
}

// NextDeadline is the earliest deadline not yet proposed for expiry.
func (t *Tracker) NextDeadline() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active || len(t.deadlines) == 0 {
		return time.Time{}, false
	}
	return t.time(t.deadlines[0].deadline), true
}

// Expired takes up to limit leases whose deadline has passed, ordered by
// deadline, and marks them as being expired. The caller proposes their
// expiry and calls Unexpire for those whose proposal failed.
func (t *Tracker) Expired(limit int) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return nil
	}
	now := t.at(t.clock.Now())
	var out []int64
	for len(t.deadlines) > 0 && len(out) < limit && now >= t.deadlines[0].deadline {
		e := heap.Pop(&t.deadlines).(*entry)
		e.expiring = true
		out = append(out, e.id)
	}
	return out
}

// Deadlines returns the deadlines of the given leases (zero for unknown
// ones), for measuring expiry lag.
func (t *Tracker) Deadlines(ids []int64) []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]time.Time, len(ids))
	for i, id := range ids {
		if e, ok := t.byID[id]; ok {
			out[i] = t.time(e.deadline)
		}
	}
	return out
}

// Unexpire returns leases whose expiry proposal failed to the heap, with
// their deadlines unchanged, so the next Expired retries them.
func (t *Tracker) Unexpire(ids []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if e, ok := t.byID[id]; ok && e.expiring {
			e.expiring = false
			heap.Push(&t.deadlines, e)
		}
	}
}

// TakeCheckpoint returns the next checkpoint entry to propose and its
// sequence number, or nil when there is nothing to say: no reset waiting,
// no lease due, and no checkpointed lease whose clock needs to advance.
// Leases are marked checkpointed as they are taken; a keep-alive that
// arrives afterwards resets them in a later batch, which the caller
// proposes after this one, so the reset always applies last.
func (t *Tracker) TakeCheckpoint(limit int) (*Checkpoint, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return nil, 0
	}
	wall := t.clock.Now()
	now := t.at(wall)
	leaseClock := t.clockBase + int64(wall.Sub(t.clockStart)/time.Millisecond)
	c := &Checkpoint{Clock: leaseClock, Resets: t.resets}
	t.resets = nil
	due := now - instant(t.cfg.CheckpointAfter)
	n := 0
	for n < len(t.renewals) && len(c.Expiries) < limit && t.renewals[n].at <= due {
		r := t.renewals[n]
		n++
		e, ok := t.byID[r.id]
		if !ok || e.expiring || e.checkpointed || e.renewed != r.at {
			continue // superseded by a later renewal, or gone
		}
		left := time.Duration(e.deadline - now)
		// Round up: a checkpoint may extend a lease by a millisecond, never
		// shorten it.
		ms := int64((left + time.Millisecond - 1) / time.Millisecond)
		c.Expiries = append(c.Expiries, Expiry{ID: e.id, Expiry: leaseClock + max(ms, 0)})
		e.checkpointed = true
		t.checkpointed++
	}
	t.renewals = t.renewals[n:]
	if len(c.Resets) == 0 && len(c.Expiries) == 0 && t.checkpointed == 0 {
		return nil, 0
	}
	t.seq++
	return c, t.seq
}

// Seq is the sequence number of the last checkpoint batch handed out. It
// keeps counting across terms, so a waiter from an old term never mistakes
// a new term's batch for its own.
func (t *Tracker) Seq() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seq
}

// plus is i+d, saturating: etcd's largest TTL is nine billion seconds,
// within a few years of int64's end in nanoseconds.
func (i instant) plus(d time.Duration) instant {
	if i > 0 && d > 0 && instant(math.MaxInt64)-i < instant(d) {
		return math.MaxInt64
	}
	return i + instant(d)
}

func (t *Tracker) at(wall time.Time) instant { return instant(wall.Sub(t.epoch)) }

func (t *Tracker) time(i instant) time.Time { return t.epoch.Add(time.Duration(i)) }

func seconds(s int64) time.Duration { return time.Duration(s) * time.Second }

// entryHeap orders entries by deadline.
type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}

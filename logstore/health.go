package logstore

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// ErrCannotPersist is wrapped by every error of a raft log or stable store
// write that failed through Guard or Stable, and by Health.Err while the
// member cannot persist.
var ErrCannotPersist = errors.New("logstore: cannot persist raft state")

// Health is whether this member's raft state (log, term, vote) can be
// written. Every failed write through Guard or Stable marks it failed;
// Probe, or the next append that succeeds, clears it.
//
// Concurrency: safe for concurrent use; Changed's channel closes on every
// transition.
type Health struct {
	log    *slog.Logger
	failed atomic.Bool
	mu     sync.Mutex
	err    error // the first failure since the state was last clear
	since  time.Time
	ch     chan struct{} // closed at the next change
}

// NewHealth returns a clear Health that reports its transitions to log.
func NewHealth(log *slog.Logger) *Health { return &Health{log: log} }

// Fail records that op failed with err, and returns the error for the
// caller, which wraps ErrCannotPersist and err.
func (h *Health) Fail(op string, err error) error {
	werr := fmt.Errorf("%w: %s: %w", ErrCannotPersist, op, err)
	h.mu.Lock()
	first := h.err == nil
	if first {
		h.err, h.since = werr, time.Now()
		h.failed.Store(true)
		h.notifyLocked()
	}
	h.mu.Unlock()
	if first {
		h.log.Error("this member cannot persist its raft state: it will not lead or campaign until the disk takes writes again",
			"op", op, "err", err)
	}
	return werr
}

// Clear records that the disk takes writes again.
func (h *Health) Clear() {
	h.mu.Lock()
	was, since := h.err, h.since
	h.err = nil
	h.failed.Store(false)
	if was != nil {
		h.notifyLocked()
	}
	h.mu.Unlock()
	if was != nil {
		h.log.Warn("this member can persist its raft state again", "unwritable-for", time.Since(since).Round(time.Millisecond))
	}
}

// Err is the failure that made the member unable to persist (wrapping
// ErrCannotPersist), or nil when it can.
func (h *Health) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Writable is Err() == nil, without taking a lock: the member may lead,
// campaign and vote.
func (h *Health) Writable() bool { return !h.failed.Load() }

// Changed returns a channel closed at the next change of Err between nil
// and not nil. A waiter takes the channel before it looks at the state,
// so no change is missed.
func (h *Health) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ch == nil {
		h.ch = make(chan struct{})
	}
	return h.ch
}

func (h *Health) notifyLocked() {
	if h.ch != nil {
		close(h.ch)
		h.ch = nil
	}
}

// awaitWritable returns once the state is clear, or false when stop
// closes first.
func (h *Health) awaitWritable(stop <-chan struct{}) bool {
	for {
		ch := h.Changed()
		if h.Writable() {
			return true
		}
		select {
		case <-ch:
		case <-stop:
			return false
		}
	}
}

// Guard returns l, the log store raft writes through, with every failed
// append or truncation marking h failed, and every append that succeeds
// clearing it.
func (h *Health) Guard(l raft.LogStore) raft.LogStore { return guardedLog{LogStore: l, h: h} }

// guardedLog is Guard's log store.
type guardedLog struct {
	raft.LogStore
	h *Health
}

func (g guardedLog) StoreLog(l *raft.Log) error { return g.StoreLogs([]*raft.Log{l}) }

// StoreLogs also clears the state when an append succeeds: a follower
// whose disk was freed appends the leader's entries before the probe's
// next try, and may take the room the probe asks for.
func (g guardedLog) StoreLogs(logs []*raft.Log) error {
	if err := g.LogStore.StoreLogs(logs); err != nil {
		return g.h.Fail("append to the raft log", err)
	}
	if !g.h.Writable() {
		g.h.Clear()
	}
	return nil
}

func (g guardedLog) DeleteRange(min, max uint64) error {
	if err := g.LogStore.DeleteRange(min, max); err != nil {
		return g.h.Fail("truncate the raft log", err)
	}
	return nil
}

// IsMonotonic passes the store's answer through (see isMonotonic).
func (g guardedLog) IsMonotonic() bool { return isMonotonic(g.LogStore) }

// keyCurrentTerm is the stable-store key of raft's current term (raft
// 1.7.3, raft.go: keyCurrentTerm).
var keyCurrentTerm = []byte("CurrentTerm")

// Stable is the stable store raft keeps its term and vote in: s, with
// failed writes marking h failed.
//
// raft panics when it cannot persist a new term (setCurrentTerm,
// raft.go:2141), which it does when it campaigns (electSelf, raft.go:1983)
// and when it hears a higher term (appendEntries raft.go:1465, requestVote
// raft.go:1668, installSnapshot raft.go:1846, runCandidate raft.go:334 and
// 369). So once raft runs (Running), a term write never fails here: it
// waits until the disk is writable and tries again. A term write of raft's
// own campaign (raft is a candidate then; every other caller makes raft a
// follower first) waits before it tries at all while the member cannot
// persist: the term write could well succeed where the append after it
// will not, and each such election would leave the term one higher.
//
// A campaign held back goes on once the disk is back; the election timer
// raft started just before it (runCandidate, raft.go:352) may have run out
// by then, so a lone member may take two elections to lead again: the
// term climbs by at most two per recovery, not once per election timeout.
//
// A term that is already durable (read or written here) is not written
// again: NewRaft and a candidate that hears the leader of its own term
// rewrite it, and they must not wait on a full disk for a no-op.
//
// Votes (LastVoteTerm, LastVoteCand) fail as raft expects: it then does
// not grant the vote (requestVote raft.go:1726) or ends its campaign
// (electSelf raft.go:2021).
//
// Concurrency: as raft.StableStore; the term cache has a lock of its own.
type Stable struct {
	raft.StableStore
	h *Health
	// running is set once raft may call from its main goroutine; before it,
	// errors return to the caller (bootstrap, NewRaft) as they are.
	running atomic.Bool
	// candidate reports whether raft is campaigning; nil until Campaigning.
	candidate atomic.Pointer[func() bool]
	stop      <-chan struct{}

	mu        sync.Mutex
	term      uint64
	termKnown bool
}

// Stable returns s as raft's stable store, guarded by h; a term write
// waiting for the disk gives up when stop closes (see Stable.SetUint64).
func (h *Health) Stable(s raft.StableStore, stop <-chan struct{}) *Stable {
	return &Stable{StableStore: s, h: h, stop: stop}
}

// Running says that raft's main goroutine may call g from now on: a term
// write waits for the disk instead of failing. Call it just before
// raft.NewRaft; bootstrap writes before it return their errors.
func (g *Stable) Running() { g.running.Store(true) }

// Campaigning gives g the way to tell whether raft is a candidate (raft's
// own campaign's term write waits while the member cannot persist); until
// it is called, raft counts as not campaigning.
func (g *Stable) Campaigning(f func() bool) { g.candidate.Store(&f) }

func (g *Stable) Set(key, val []byte) error {
	if err := g.StableStore.Set(key, val); err != nil {
		return g.h.Fail("persist "+string(key), err)
	}
	return nil
}

func (g *Stable) GetUint64(key []byte) (uint64, error) {
	v, err := g.StableStore.GetUint64(key)
	if string(key) == string(keyCurrentTerm) {
		// raft reads "not found" as term 0, and so does this cache.
		if err == nil || err.Error() == "not found" {
			g.remember(v)
		}
	}
	return v, err
}

func (g *Stable) remember(term uint64) {
	g.mu.Lock()
	g.term, g.termKnown = term, true
	g.mu.Unlock()
}

func (g *Stable) durable(term uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.termKnown && g.term == term
}

// SetUint64 stores val under key. A term write once raft runs returns
// only once the term is durable, or never: when the member stops first,
// it ends raft's main goroutine (see await).
func (g *Stable) SetUint64(key []byte, val uint64) error {
	if string(key) != string(keyCurrentTerm) {
		if err := g.StableStore.SetUint64(key, val); err != nil {
			return g.h.Fail("persist "+string(key), err)
		}
		return nil
	}
	if g.durable(val) {
		return nil
	}
	for {
		if g.running.Load() && !g.h.Writable() && g.campaigning() {
			g.h.log.Warn("not starting an election while this member cannot persist its raft state", "term", val)
			g.await()
		}
		err := g.StableStore.SetUint64(key, val)
		if err == nil {
			g.remember(val)
			return nil
		}
		werr := g.h.Fail("persist the raft term", err)
		if !g.running.Load() {
			return werr
		}
		g.h.log.Error("raft cannot persist its term; it waits until the disk takes writes", "term", val, "err", err)
		g.await()
	}
}

func (g *Stable) campaigning() bool {
	f := g.candidate.Load()
	return f != nil && (*f)()
}

// await waits until the disk is writable again. Only raft's main goroutine
// gets here (raft runs setCurrentTerm nowhere else once it started), and
// when the member stops first, that goroutine ends here: returning an error
// would make raft panic, and returning nil would let raft act on a term it
// never stored. Goexit runs raft's deferred calls, so Shutdown, which waits
// for the goroutine, completes.
func (g *Stable) await() {
	if !g.h.awaitWritable(g.stop) {
		runtime.Goexit()
	}
}

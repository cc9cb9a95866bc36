// Storage health: whether this member can write its raft state (log, term,
// vote), and what it does while it cannot. A member that cannot persist
// must not lead or campaign: raft would elect it, its first append would
// fail, it would step down, and the next election would start over one
// term higher (the flapping a lone member with a full disk showed). So
// every failed write marks the member "cannot persist" (storageState), and
// until a probe of the disk succeeds it:
//
//   - sends no RequestPreVote or RequestVote (replication refuses them), so
//     in a cluster its candidacy fails at the pre-vote and the term stays;
//   - does not persist a term of its own campaign (guardedStable holds it
//     back until the disk is writable), which is what stops a lone member,
//     whose pre-vote needs no one else;
//   - answers proposals that failed on its disk with ErrNotLeader: raft
//     stepped it down, and the entry was stored nowhere (raft stores a
//     leader's entry locally before it replicates it, raft.go:1266), so the
//     client's request can go to whichever member leads now;
//   - reports it (StorageErr, the corenode_disk_writable gauge, /health).
//
// Recovery is by itself: a probe (probeStorage) writes and fsyncs a small
// file in the log's directory on a ticker while the member cannot persist;
// when that succeeds it reopens the log store and clears the state. A
// follower then accepts the leader's appends again (the leader keeps
// retrying a follower whose appends failed, backing off up to about 10 s,
// and sends a snapshot when the entries are gone from its log).

package node

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// ErrCannotPersist is the error a write to the raft log or stable store
// fails with; StorageErr wraps it while the member cannot persist.
var ErrCannotPersist = errors.New("node: cannot persist raft state")

// storageState is whether this member's raft state can be written.
//
// Concurrency: safe for concurrent use; changed wakes waiters on every
// transition.
type storageState struct {
	failed  atomic.Bool
	mu      sync.Mutex
	err     error // the first failure since the state was last clear
	since   time.Time
	changed signal
}

// fail records that op failed with err, and returns the error for the
// caller, which wraps ErrCannotPersist.
func (s *storageState) fail(log *slog.Logger, op string, err error) error {
	werr := fmt.Errorf("%w: %s: %w", ErrCannotPersist, op, err)
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err, s.since = werr, time.Now()
		s.failed.Store(true)
	}
	s.mu.Unlock()
	if first {
		log.Error("this member cannot persist its raft state: it will not lead or campaign until the disk takes writes again",
			"op", op, "err", err)
		s.changed.Notify()
	}
	return werr
}

// clear records that the disk takes writes again.
func (s *storageState) clear(log *slog.Logger) {
	s.mu.Lock()
	was, since := s.err, s.since
	s.err = nil
	s.failed.Store(false)
	s.mu.Unlock()
	if was != nil {
		log.Warn("this member can persist its raft state again", "unwritable-for", time.Since(since).Round(time.Millisecond))
		s.changed.Notify()
	}
}

// Err is the failure that made the member unable to persist, or nil.
func (s *storageState) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// awaitWritable returns once the state is clear, or false when stop
// closes first.
func (s *storageState) awaitWritable(stop <-chan struct{}) bool {
	for {
		ch := s.changed.Wait()
		if !s.failed.Load() {
			return true
		}
		select {
		case <-ch:
		case <-stop:
			return false
		}
	}
}

// StorageErr is why this member cannot persist its raft state (wrapping
// ErrCannotPersist), or nil when it can. While it is not nil the member
// neither leads nor campaigns, and falls behind the leader.
func (n *Node) StorageErr() error { return n.storage.Err() }

// StorageChange returns a channel closed at the next change of StorageErr
// between nil and not nil.
func (n *Node) StorageChange() <-chan struct{} { return n.storage.changed.Wait() }

// guardedLog is the log store raft writes through: a failed append or
// truncation marks the member unable to persist.
type guardedLog struct {
	raft.LogStore
	s   *storageState
	log *slog.Logger
}

func (g guardedLog) StoreLog(l *raft.Log) error { return g.StoreLogs([]*raft.Log{l}) }

// StoreLogs also clears the state when an append succeeds: a follower
// whose disk was freed appends the leader's entries before the probe's
// next try, and may take the room the probe asks for.
func (g guardedLog) StoreLogs(logs []*raft.Log) error {
	if err := g.LogStore.StoreLogs(logs); err != nil {
		return g.s.fail(g.log, "append to the raft log", err)
	}
	if g.s.failed.Load() {
		g.s.clear(g.log)
	}
	return nil
}

func (g guardedLog) DeleteRange(min, max uint64) error {
	if err := g.LogStore.DeleteRange(min, max); err != nil {
		return g.s.fail(g.log, "truncate the raft log", err)
	}
	return nil
}

// IsMonotonic passes the store's answer through (see timedLogStore).
func (g guardedLog) IsMonotonic() bool { return isMonotonic(g.LogStore) }

// keyCurrentTerm is the stable-store key of raft's current term (raft
// 1.7.3, raft.go: keyCurrentTerm).
var keyCurrentTerm = []byte("CurrentTerm")

// guardedStable is the stable store raft keeps its term and vote in.
//
// raft panics when it cannot persist a new term (setCurrentTerm,
// raft.go:2141), which it does when it campaigns (electSelf, raft.go:1983)
// and when it hears a higher term (appendEntries raft.go:1465, requestVote
// raft.go:1668, installSnapshot raft.go:1846, runCandidate raft.go:334 and
// 369). So once raft runs, a term write never fails here: it waits until
// the disk is writable and tries again. A term write of raft's own
// campaign (raft is a candidate then; every other caller makes raft a
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
type guardedStable struct {
	raft.StableStore
	s   *storageState
	log *slog.Logger
	// running is set once raft may call from its main goroutine; before it,
	// errors return to the caller (bootstrap, NewRaft) as they are.
	running atomic.Bool
	// candidate reports whether raft is campaigning; nil before raft runs.
	candidate atomic.Pointer[func() bool]
	stop      <-chan struct{}

	mu        sync.Mutex
	term      uint64
	termKnown bool
}

func (g *guardedStable) Set(key, val []byte) error {
	if err := g.StableStore.Set(key, val); err != nil {
		return g.s.fail(g.log, "persist "+string(key), err)
	}
	return nil
}

func (g *guardedStable) GetUint64(key []byte) (uint64, error) {
	v, err := g.StableStore.GetUint64(key)
	if string(key) == string(keyCurrentTerm) {
		// raft reads "not found" as term 0, and so does this cache.
		if err == nil || err.Error() == "not found" {
			g.remember(v)
		}
	}
	return v, err
}

func (g *guardedStable) remember(term uint64) {
	g.mu.Lock()
	g.term, g.termKnown = term, true
	g.mu.Unlock()
}

func (g *guardedStable) durable(term uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.termKnown && g.term == term
}

func (g *guardedStable) SetUint64(key []byte, val uint64) error {
	if string(key) != string(keyCurrentTerm) {
		if err := g.StableStore.SetUint64(key, val); err != nil {
			return g.s.fail(g.log, "persist "+string(key), err)
		}
		return nil
	}
	if g.durable(val) {
		return nil
	}
	for {
		if g.running.Load() && g.s.failed.Load() && g.campaigning() {
			g.log.Warn("not starting an election while this member cannot persist its raft state", "term", val)
			g.await()
		}
		err := g.StableStore.SetUint64(key, val)
		if err == nil {
			g.remember(val)
			return nil
		}
		werr := g.s.fail(g.log, "persist the raft term", err)
		if !g.running.Load() {
			return werr
		}
		g.log.Error("raft cannot persist its term; it waits until the disk takes writes", "term", val, "err", err)
		g.await()
	}
}

func (g *guardedStable) campaigning() bool {
	f := g.candidate.Load()
	return f != nil && (*f)()
}

// await waits until the disk is writable again. Only raft's main goroutine
// gets here (raft runs setCurrentTerm nowhere else once it started), and
// when the member stops first, that goroutine ends here: returning an error
// would make raft panic, and returning nil would let raft act on a term it
// never stored. Goexit runs raft's deferred calls, so Shutdown, which waits
// for the goroutine, completes.
func (g *guardedStable) await() {
	if !g.s.awaitWritable(g.stop) {
		runtime.Goexit()
	}
}

// Storage probe parameters: how often a member that cannot persist tries
// the disk, and how much it writes. It also asks for that much free space,
// and with the wal for a segment more: nearly every way a wal append fails
// on a full disk ends with raft-wal creating its next segment (16 MiB,
// preallocated) once it can, so with less than that the member would call
// itself writable, lead, fail its first append and step down again, one
// term higher each time.
const (
	defaultStorageProbeInterval = time.Second
	probeBytes                  = 64 << 10
)

// probeStorage runs until stop closes: idle while the member can persist,
// and while it cannot, it tries the disk on every tick of the ticker; once
// the disk takes a write it reopens the log store and clears the state.
func (n *Node) probeStorage() {
	defer n.done.Done()
	for {
		ch := n.storage.changed.Wait()
		if !n.storage.failed.Load() {
			select {
			case <-n.stop:
				return
			case <-ch:
				continue
			}
		}
		ticks, stopTicker := n.ticker(n.cfg.StorageProbeInterval)
		tick := func() bool {
			select {
			case <-n.stop:
				return false
			case <-ticks:
				return true
			}
		}
		for n.storage.failed.Load() && tick() {
			if err := n.tryStorage(tick); err != nil {
				n.log.Debug("the disk does not take writes yet", "err", err)
				continue
			}
			n.storage.clear(n.log)
		}
		stopTicker()
		select {
		case <-n.stop:
			return
		default:
		}
	}
}

// tryStorage checks that the log's directory has room and takes an
// fsynced write, then reopens the log store; tick waits for the next try.
func (n *Node) tryStorage(tick func() bool) error {
	dir, need := n.cfg.DataDir, uint64(probeBytes)
	if n.storeKind == LogStoreWAL {
		dir, need = filepath.Join(dir, walDir), need+walSegmentSize
	}
	if err := probeDir(dir, need); err != nil {
		return err
	}
	return n.store.reopen(func(err error) bool {
		n.log.Error("the disk takes writes again, but the raft log does not open; raft waits for it", "err", err)
		return tick()
	})
}

// probeDir checks that dir has need bytes free and takes a write of
// probeBytes, fsynced, in a file it then removes.
func probeDir(dir string, need uint64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if free := st.Bavail * uint64(st.Bsize); free < need {
		return fmt.Errorf("%s: %d bytes free, %d needed", dir, free, need)
	}
	f, err := os.CreateTemp(dir, ".probe-")
	if err != nil {
		return fmt.Errorf("create probe file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, probeBytes)); err != nil {
		return fmt.Errorf("write probe file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync probe file: %w", err)
	}
	return nil
}

// systemTicker is the ticker probeStorage uses unless a test replaces it.
func systemTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

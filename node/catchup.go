package node

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// Catching up after a restart (and on joining). hashicorp/raft 1.7
// restores only the latest snapshot into the FSM when it starts, and
// applies the log after it once it learns those entries are committed:
// from a leader's append, or by committing an entry of its own term as
// leader. It keeps no commit index
// on disk (etcd keeps one in its HardState and replays its WAL up to it).
// Until then the FSM can hold older state than this member served before
// it stopped: a serializable read would go back in time, and auth enabled
// after the snapshot would be unknown, so requests would go unchecked.
// CaughtUp says when that window has closed; the client edge waits for it.
// New first replays what this member knows committed (replay.go): after a
// crash of the process that holds every write it answered, and closes the
// window unless its log holds entries after the last it applied. The gate
// stays for those, and for what the member cannot know: a commit mark
// behind the log after a power loss, or a data dir without one.
//
// The argument: every entry this member applied before it stopped was
// committed and in its log when it started, at or before the log's last
// index L, whose term was T. The FSM holds all of those once it has applied
// the log through L (committed entries are never removed from a log, and
// whatever sits at L now is applied only once committed), or through a
// commit index c this run learned, where c >= L or the entry at c has a
// term later than T: then a leader of a later term committed its own entry
// at c, and every entry committed in earlier terms precedes it in its log.

// A member joining a running cluster starts with no log and no snapshot.
// It applied nothing before, but its clients expect the cluster's state,
// not an empty store (etcd's new member serves once it has applied its own
// publish entry), so it serves once it has applied through the first
// commit index a leader named to it. (raft's own commit index will not do:
// it is capped at the end of the follower's log, which the leader fills a
// batch at a time.)
var joining = logPosition{index: 1}

// ErrCatchingUp is a member's refusal to serve before it has caught up
// (CaughtUp).
var ErrCatchingUp = errors.New("node: this member is still catching up with the cluster since it started")

// logPosition is an entry's place in the log.
type logPosition struct{ index, term uint64 }

// lastEntry is the last entry of the log as raft will start with it.
func lastEntry(logs raft.LogStore) (logPosition, error) {
	last, err := logs.LastIndex()
	if err != nil || last == 0 {
		return logPosition{}, err
	}
	var l raft.Log
	if err := logs.GetLog(last, &l); err != nil {
		return logPosition{}, err
	}
	return logPosition{index: last, term: l.Term}, nil
}

// CaughtUp returns a channel closed once this member's state includes
// every write it had applied before it restarted or, joining a running
// cluster, what the leader had committed when it first heard from it. It
// is closed from the start when there is nothing to wait for: a snapshot
// with no log after it.
func (n *Node) CaughtUp() <-chan struct{} { return n.caughtUp }

// AwaitCaughtUp returns nil once CaughtUp is closed, or ErrCatchingUp when
// ctx ends first.
func (n *Node) AwaitCaughtUp(ctx context.Context) error {
	select {
	case <-n.caughtUp:
		return nil
	default:
	}
	select {
	case <-n.caughtUp:
		return nil
	case <-ctx.Done():
		return ErrCatchingUp
	}
}

// holdsStart reports whether the FSM holds every entry start (the log's
// last entry when raft started) could stand for (see the argument above).
// Before raft knows any commit index, only a log applied through start
// will do (a snapshot that covers it, or a tail of no-ops); after, the
// commit index must reach start or be an entry of a later term. A commit
// index below start of an earlier term proves nothing: a new leader names
// its predecessors' commit index until it commits an entry of its own.
func (n *Node) holdsStart(start logPosition) bool {
	if t := n.readyTerm.Load(); t != 0 && t == n.raft.CurrentTerm() {
		// A leader that has applied its predecessors' entries holds every
		// committed entry (Leader Completeness), and a single member
		// hears from no leader but itself.
		return true
	}
	if start == joining {
		named := n.repl.firstCommitNamed.Load()
		return named > 0 && n.raft.CommitIndex() >= named && n.fsm.Applied() >= n.stateIndex(named)
	}
	if n.appliedThrough(start.index) {
		return true
	}
	commit := n.raft.CommitIndex()
	if commit == 0 {
		return false
	}
	if commit < start.index {
		var l raft.Log
		if n.logs.GetLog(commit, &l) != nil || l.Term <= start.term {
			return false
		}
	}
	// raft hands the FSM a snapshot before it compacts the log behind it,
	// so stateIndex's fallback to the FSM's own index holds here.
	return n.fsm.Applied() >= n.stateIndex(commit)
}

// appliedThrough reports whether the FSM has applied every entry of the
// log up to index that changes state (stateIndex). An index past the log's
// end is not applied: a new leader may have cut the tail that held it.
func (n *Node) appliedThrough(index uint64) bool {
	last, err := n.logs.LastIndex()
	return err == nil && index <= last && n.fsm.Applied() >= n.stateIndex(index)
}

// awaitCatchUp closes caughtUp once the FSM holds start. What can move it
// there: the FSM applying entries (AppliedChanged), raft handling a
// leader's append that named a commit index (the replication's answered
// signal: a commit of entries that never reach the FSM, a leader's no-op,
// moves nothing else), and this member finishing its own barrier as leader
// (ready).
func (n *Node) awaitCatchUp(start logPosition) {
	defer n.done.Done()
	defer n.repl.watchAnswers.Store(false)
	began := time.Now()
	for {
		applied, answered, ready := n.fsm.AppliedChanged(), n.repl.answered.Wait(), n.ready.Wait()
		if n.holdsStart(start) {
			close(n.caughtUp)
			n.log.Info("caught up since start", "log-end", start.index, "applied", n.fsm.Applied(), "took", time.Since(began))
			return
		}
		select {
		case <-applied:
		case <-answered:
		case <-ready:
		case <-n.stop:
			return
		}
	}
}

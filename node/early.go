package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/logstore"
)

// Early replication: the leader sends a batch of new entries to its
// followers while it writes the batch to its own disk, instead of after.
//
// hashicorp/raft's leader stores a batch in its log (durable before
// StoreLogs returns) and only then wakes its replicators, whose followers
// store it in turn: a write waits for two flushes in a row, the leader's
// and then a follower's. Raft needs neither order: a leader may send
// entries before they are durable on its own disk, as long as it counts
// itself towards a quorum only once they are, and hashicorp's commitment
// tracker counts the leader only after StoreLogs returns (dispatchLogs).
// So on the leader the log store hands every batch of the leader's own
// term to one sender per follower before it writes; the sender appends it
// to that follower over raft's transport, and the follower stores it while
// the leader does. hashicorp's own append of the same entries, made once
// the leader's write returned, is answered from the follower's
// acknowledgement without a round trip (replication.trimLocked); that
// answer is what counts the follower, so a write is still acknowledged
// only once a quorum, the leader among it only after its own flush, has
// it on disk.
//
// An early append is an ordinary AppendEntries of this term from this
// term's leader, so the follower checks it like any other: a follower in a
// later term refuses it, and the follower's log must hold the entry before
// it with the same term. It is sent only to a follower that acknowledged
// holding that previous entry in this term (so it is never refused for a
// gap, which hashicorp would log as a warning), and only for entries it is
// not known to hold; anything else is left to hashicorp's replication,
// which repairs every follower as it always did. The commit index it
// carries is at most its previous entry, which the follower has just been
// shown to hold as we do.
//
// No wait here can wedge replication (reliability.md, anomaly 5: raft's
// append once waited for a sender that waited for an answer that never
// came). raft's append waits only for an early append that is on the wire
// (a transport call that returns, at the latest by the transport's
// timeout), and at most maxEarlyWait; the sender, while it waits for an
// answer to another append, holds nothing raft's append would wait for.

// maxEarlyEntries bounds what waits for one follower's sender: a follower
// that is slow or unreachable keeps its sender in one append for up to the
// transport's I/O timeout, and the batches meanwhile are dropped rather
// than held (hashicorp's replication sends them as it always did).
const maxEarlyEntries = 512

// earlyLogStore is the leader-side hook: the raft log store, which offers
// every batch of entries of the term this member leads to the followers'
// senders before it writes the batch.
//
// Concurrency: raft calls StoreLogs from one goroutine at a time (its main
// loop); the other methods pass through.
type earlyLogStore struct {
	raft.LogStore
	n *Node
}

func (s earlyLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s earlyLogStore) StoreLogs(logs []*raft.Log) error {
	// Only this term's leader makes entries of its term; a member deposed
	// meanwhile stores that term's entries as a follower too, from the next
	// leader, and must not pass them on as their leader.
	if e := s.n.early.Load(); e != nil && len(logs) > 0 && logs[0].Term == e.term && !stampedOnStore(logs) && s.n.raft.State() == raft.Leader {
		e.offer(logs)
	}
	return s.LogStore.StoreLogs(logs)
}

// stampedOnStore reports whether the store writes into an entry of logs as
// it stores it (logstore.StampedOnStore): sent early, that entry would
// reach the followers without its stamp, and its encoding would race the
// write. raft sends such a batch, a barrier every verify interval and at
// each term's start, as it always did.
func stampedOnStore(logs []*raft.Log) bool {
	return slices.ContainsFunc(logs, logstore.StampedOnStore)
}

// IsMonotonic passes the wrapped store's answer through: raft reads it
// from the store it is given, and must not lose it to this wrapper.
func (s earlyLogStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// earlyReplication is one leadership term's set of follower senders,
// built when the term's leadership starts (lead) and dropped when it ends.
type earlyReplication struct {
	term uint64

	mu    sync.Mutex
	peers map[raft.ServerID]*earlyPeer
}

// earlyPeer is what waits to be sent early to one follower.
type earlyPeer struct {
	mu      sync.Mutex
	pending []*raft.Log
	since   time.Time     // when the first of pending was offered
	wake    chan struct{} // capacity 1: an offer never blocks the raft loop
}

func newEarlyReplication(term uint64) *earlyReplication {
	return &earlyReplication{term: term, peers: map[raft.ServerID]*earlyPeer{}}
}

// offer queues logs for every follower's sender. It never blocks on a
// sender: it runs on raft's leader loop, ahead of the leader's own write.
func (e *earlyReplication) offer(logs []*raft.Log) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	for _, p := range e.peers {
		p.mu.Lock()
		if len(p.pending)+len(logs) > maxEarlyEntries {
			p.pending = nil
		} else {
			if len(p.pending) == 0 {
				p.since = now
			}
			p.pending = append(p.pending, logs...)
		}
		p.mu.Unlock()
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// add registers a follower and returns its queue.
func (e *earlyReplication) add(id raft.ServerID) *earlyPeer {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := &earlyPeer{wake: make(chan struct{}, 1)}
	e.peers[id] = p
	return p
}

// remove forgets a follower that left the configuration.
func (e *earlyReplication) remove(id raft.ServerID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.peers, id)
}

// take returns everything queued for p, in index order, and when the
// first of it was offered.
func (p *earlyPeer) take() ([]*raft.Log, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	batch := p.pending
	p.pending = nil
	return batch, p.since
}

// sendEarly runs while this member leads term: it appends the batches
// queued for follower id, one append at a time, each carrying everything
// queued meanwhile. An append to it already on its way (raft's, or a
// commit notice) does not hold it back when the follower is known to hold
// the batch's previous entry; when that entry is only on its way, it waits
// for the answer, holding nothing raft's replication waits for.
func (n *Node) sendEarly(ctx context.Context, term uint64, id raft.ServerID, addr raft.ServerAddress, p *earlyPeer) {
	var batch []*raft.Log
	var since time.Time // when batch's first entry was offered
	for {
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			}
		}
		more, offered := p.take()
		joined := joinRun(batch, more)
		if len(batch) == 0 || len(joined) > 0 && len(more) > 0 && joined[0] == more[0] {
			since = offered
		}
		batch = joined
		if len(batch) == 0 || len(batch) > maxEarlyEntries {
			batch = nil
			continue
		}
		match, _, inflight, changed := n.repl.progress(id, term)
		if last := batch[len(batch)-1].Index; match >= last {
			batch = nil // it holds them all (raft's append got there first)
			continue
		} else if prev := batch[0].Index - 1; match > prev {
			batch = batch[match-prev:] // what it holds is not sent again
		}
		prev := batch[0].Index - 1
		if match < prev {
			if inflight && n.repl.sent(id, term) >= prev {
				// The previous entry is on its way to it: its answer
				// decides.
				select {
				case <-ctx.Done():
					return
				case <-changed:
				}
				continue
			}
			batch = nil // a gap, which raft's own replication fills
			continue
		}
		if err := n.appendEarly(term, id, addr, prev, batch); err != nil {
			n.log.Debug("early append to a follower failed", "follower", id, "first", batch[0].Index, "err", err)
		} else {
			n.metrics.earlyLatency.Observe(time.Since(since).Seconds())
		}
		batch = nil
	}
}

// joinRun returns batch followed by more when together they are one run
// of consecutive indexes. Otherwise batch is stale (the queue dropped
// entries between them) and more, if one run itself, replaces it; nil if
// not.
func joinRun(batch, more []*raft.Log) []*raft.Log {
	if len(more) == 0 {
		return batch
	}
	if !isRun(more) {
		return nil
	}
	if len(batch) > 0 && more[0].Index == batch[len(batch)-1].Index+1 {
		return append(batch, more...)
	}
	return more
}

// isRun reports whether logs hold consecutive indexes.
func isRun(logs []*raft.Log) bool {
	return logs[len(logs)-1].Index-logs[0].Index == uint64(len(logs)-1)
}

// appendEarly sends follower id the entries after prev, which it holds,
// with a commit index it can take (at most prev).
func (n *Node) appendEarly(term uint64, id raft.ServerID, addr raft.ServerAddress, prev uint64, entries []*raft.Log) error {
	if err := n.appendAfter(term, id, addr, prev, entries, min(n.raft.CommitIndex(), prev), true); err != nil {
		return err
	}
	n.metrics.earlyAppends.Inc()
	return nil
}

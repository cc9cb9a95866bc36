package node

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// Early replication: the leader sends a batch of new entries to its
// followers while it writes the batch to its own disk, instead of after.
//
// hashicorp/raft's leader stores a batch in its log (a BoltDB commit: two
// fdatasyncs) and only then wakes its replicators, whose followers store
// it in turn (two more each). A write therefore waits for two disk
// commits in a row. Raft needs neither order: a leader may send entries
// before they are durable on its own disk, as long as it counts itself
// towards a quorum only once they are, and hashicorp's commitment tracker
// still counts the leader only after StoreLogs returns. So on the leader
// the log store hands every batch of the leader's own term to one sender
// per follower before it writes; the sender appends it to that follower
// over raft's transport, and the follower stores it while the leader does.
// When hashicorp's own append of the same entries reaches the follower, it
// finds them already in its log (same index, same term), writes nothing
// and answers at once; that answer is what commits the entries.
//
// An early append is an ordinary AppendEntries of this term from this
// term's leader, so the follower checks it like any other: it is refused
// by a follower in a later term, and the follower's log must hold the
// entry before it with the same term. It is sent only to a follower that
// has acknowledged holding that previous entry in this term (so it is not
// refused for a gap, which hashicorp would log as a warning) and has no
// other append on its way (so it is waiting for the leader), and only for
// entries it is not known to hold; anything else is left to hashicorp's
// replication, which repairs every follower as before. The
// commit index it carries is at most its previous entry, which the
// follower has just been shown to hold as we do.

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
	// Only this term's leader makes entries of its term, so a batch of the
	// term this member leads (or led, if it has just stepped down) is one
	// the leader loop is dispatching.
	if e := s.n.early.Load(); e != nil && len(logs) > 0 && logs[0].Term == e.term {
		e.offer(logs)
	}
	return s.LogStore.StoreLogs(logs)
}

// earlyReplication is one leadership term's set of follower senders.
type earlyReplication struct {
	term uint64

	mu    sync.Mutex
	peers map[raft.ServerID]*earlyPeer
}

// earlyPeer is what waits to be sent early to one follower.
type earlyPeer struct {
	mu      sync.Mutex
	pending []*raft.Log
	wake    chan struct{} // capacity 1: a send never blocks the raft loop
}

func newEarlyReplication(term uint64) *earlyReplication {
	return &earlyReplication{term: term, peers: map[raft.ServerID]*earlyPeer{}}
}

// offer queues logs for every follower's sender. It never blocks on a
// sender: it runs on raft's leader loop, ahead of the leader's own write.
func (e *earlyReplication) offer(logs []*raft.Log) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.peers {
		p.mu.Lock()
		if len(p.pending)+len(logs) > maxEarlyEntries {
			p.pending = nil
		} else {
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

// take returns everything queued for p, in index order.
func (p *earlyPeer) take() []*raft.Log {
	p.mu.Lock()
	defer p.mu.Unlock()
	batch := p.pending
	p.pending = nil
	return batch
}

// sendEarly runs while this member leads term: it appends the batches
// queued for follower id, one append at a time, each carrying everything
// queued meanwhile.
func (n *Node) sendEarly(ctx context.Context, term uint64, id raft.ServerID, addr raft.ServerAddress, p *earlyPeer) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		batch := p.take()
		if len(batch) == 0 || batch[len(batch)-1].Index-batch[0].Index != uint64(len(batch)-1) {
			continue // nothing, or not one run of entries: raft's replication sends them
		}
		match, _, inflight, _ := n.repl.progress(id, term)
		prev := batch[0].Index - 1
		if match < prev || inflight {
			// A gap, which raft's own replication fills; or an append
			// (raft's, or a commit notice) already on its way, whose
			// answer raft awaits before it sends the next one with every
			// entry waiting: under a steady write load the follower's disk
			// is busy anyway and an early copy would only be sent twice.
			continue
		}
		// Entries it already holds (raft's own append got there first)
		// are not sent again.
		if last := batch[len(batch)-1].Index; match >= last {
			continue
		} else if match > prev {
			batch = batch[match-prev:]
			prev = match
		}
		if err := n.appendEarly(term, id, addr, prev, batch); err != nil {
			n.log.Debug("early append to a follower failed", "follower", id, "first", batch[0].Index, "err", err)
		}
	}
}

// appendEarly sends follower id the entries after prev, which it holds,
// with a commit index it can take (at most prev).
func (n *Node) appendEarly(term uint64, id raft.ServerID, addr raft.ServerAddress, prev uint64, entries []*raft.Log) error {
	if err := n.appendAfter(term, id, addr, prev, entries, min(n.raft.CommitIndex(), prev)); err != nil {
		return err
	}
	n.metrics.earlyAppends.Inc()
	return nil
}

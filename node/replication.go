package node

import (
	"errors"
	"io"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// replication wraps the raft transport of every member. It does three
// things:
//
//   - It keeps hashicorp/raft to one AppendEntries in flight per follower by
//     refusing pipelined replication. hashicorp's pipeline can wedge a raft
//     shutdown (a replication goroutine blocked on a full in-flight queue
//     whose reader waits on a decoder that has exited); without it that
//     hang cannot happen. On loopback and LAN links the pipeline bought
//     little: a follower stores appends one at a time anyway, and each
//     append carries every entry waiting (up to MaxAppendEntries).
//   - On the leader it watches every append and its answer, so the commit
//     teller (tellCommits) and the early sender (sendEarly) know, per
//     follower, the last index that follower acknowledged holding in this
//     term, the highest commit index it has been told, and whether an
//     append to it is in flight.
//   - It answers raft's appends from what followers already acknowledged.
//     Early replication (early.go) sends a follower new entries before
//     raft's replicator does; raft then sends the same entries again. An
//     append of raft's waits for an early append to that follower on its
//     way, is sent without the entries the follower has acknowledged in
//     this term, and is answered here, without a round trip, when no entry
//     is left. That answer is true: a follower that acknowledged an entry
//     from this term's leader holds it durably with the leader's log up to
//     it, and no later leader can be elected without that follower's log
//     or a quorum holding the entry (Raft's election restriction), so the
//     entry counts towards its quorum whatever the follower has heard
//     since. A leader deposed meanwhile learns it from its heartbeats and
//     from its next append that carries an entry, as before. This member
//     does not use raft's VerifyLeader, which would count such an answer
//     as a confirmation of leadership (confirmTerm asks every time).
//
// Concurrency: raft calls the Transport methods from its replication,
// heartbeat and main goroutines at once; the commit tellers and early
// senders call AppendEntries and progress from their own goroutines. mu
// guards peers.
type replication struct {
	raft.Transport

	mu    sync.Mutex
	peers map[raft.ServerID]*peerProgress
	// closed is closed by Close: an append of raft's waiting for an early
	// one stops waiting, so raft's shutdown never waits on it.
	closed    chan struct{}
	closeOnce sync.Once

	// sent, trimmed and answered count raft's appends of entries by what
	// became of them.
	sent, trimmed, answered prometheus.Counter
}

// peerProgress is what the leader knows of one follower's log, from appends
// sent in term.
type peerProgress struct {
	term uint64
	// match is the highest index the follower acknowledged holding, with
	// this leader's entries up to it (a successful append proves the logs
	// match up to its last entry).
	match uint64
	// told is the highest commit index the follower was told with a match
	// at least as high, so it has committed up to told.
	told uint64
	// inflight counts appends to it that carry entries or a commit index
	// (heartbeats carry neither and are not counted).
	inflight int
	// earlyFirst and earlyLast are the entries the early sender holds to
	// send, waiting or on their way; earlyFirst is 0 if none.
	earlyFirst, earlyLast uint64
	// changed is closed and replaced whenever an append to it completes.
	changed chan struct{}
}

func newReplication(t raft.Transport, m *metrics) *replication {
	return &replication{Transport: t, peers: map[raft.ServerID]*peerProgress{}, closed: make(chan struct{}),
		sent:     m.raftAppends.WithLabelValues("sent"),
		trimmed:  m.raftAppends.WithLabelValues("trimmed"),
		answered: m.raftAppends.WithLabelValues("answered"),
	}
}

// AppendEntriesPipeline refuses pipelining: raft falls back to one
// synchronous AppendEntries at a time per follower.
func (r *replication) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// AppendEntries is raft's: it sends an append, or answers it from what the
// follower acknowledged (see replication), and records what the answer
// proves.
func (r *replication) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if args.PrevLogEntry == 0 && len(args.Entries) == 0 && args.LeaderCommitIndex == 0 {
		return r.Transport.AppendEntries(id, target, args, resp) // a heartbeat
	}
	return r.appendEntries(id, target, args, resp, false)
}

// appendEarly sends an early append (see early.go) and records its answer.
// An early append of entries the follower already acknowledged is sent
// as is: sendEarly leaves those out itself.
func (r *replication) appendEarly(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return r.appendEntries(id, target, args, resp, true)
}

func (r *replication) appendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, early bool) error {
	last := args.PrevLogEntry
	if n := len(args.Entries); n > 0 {
		last = args.Entries[n-1].Index
	}
	// raft's own appends of entries may be trimmed or answered here.
	raftEntries := !early && len(args.Entries) > 0
	r.mu.Lock()
	send := args
	if raftEntries {
		send = r.trimLocked(id, args)
	}
	// Only an append of the records' own term counts as in flight: one of
	// an earlier term (a deposed leader's replicator still winding down
	// when this member leads again) would never be uncounted below, and
	// the early sender would wait for its answer for the rest of the term.
	p := r.peerLocked(id, args.Term)
	counted := p.term == args.Term
	if counted {
		p.inflight++
	}
	r.mu.Unlock()

	if raftEntries {
		switch send {
		case nil:
			r.answered.Inc()
		case args:
			r.sent.Inc()
		default:
			r.trimmed.Inc()
		}
	}
	var err error
	if send == nil {
		// The follower acknowledged every entry: answer as it did.
		*resp = raft.AppendEntriesResponse{
			RPCHeader: raft.RPCHeader{ProtocolVersion: args.ProtocolVersion, ID: []byte(id), Addr: r.EncodePeer(id, target)},
			Term:      args.Term, LastLog: last, Success: true,
		}
	} else {
		err = r.Transport.AppendEntries(id, target, send, resp)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	p = r.peerLocked(id, args.Term)
	if counted && p.term == args.Term {
		p.inflight--
	}
	if err == nil && resp.Success && resp.Term == args.Term && p.term == args.Term {
		p.match = max(p.match, last)
		// The follower set its commit index to min(LeaderCommitIndex, its
		// last index), and its last index is at least last. An answer
		// given here told it nothing.
		if send != nil {
			p.told = max(p.told, min(send.LeaderCommitIndex, last))
		}
	}
	p.changedLocked()
	return err
}

// claimEarly records that follower id's early sender holds entries first
// through last of term to send (first 0: none). raft's append that starts
// among them waits until the sender has sent them or let them go.
func (r *replication) claimEarly(id raft.ServerID, term, first, last uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.peerLocked(id, term)
	if p.term != term || p.earlyFirst == first && p.earlyLast == last {
		return
	}
	p.earlyFirst, p.earlyLast = first, last
	p.changedLocked()
}

// trimLocked returns what to send of raft's append args: nil when the
// follower acknowledged all of its entries in args' term, args without
// those it acknowledged otherwise. It first waits, with mu released, while
// the early sender holds the append's first entry (waiting to send it or
// sending it): the answer to that early append decides what is left to
// send. The early sender never waits for an append that waits here (those
// are not yet counted in flight), so the two cannot wait for each other.
// raft reads args again once the call returns (its last entry, for the
// follower's match), so args is not changed; a trimmed append is a copy.
func (r *replication) trimLocked(id raft.ServerID, args *raft.AppendEntriesRequest) *raft.AppendEntriesRequest {
	first := args.Entries[0].Index
	for {
		p := r.peerLocked(id, args.Term)
		if p.term != args.Term {
			return args
		}
		if p.earlyFirst == 0 || first < p.earlyFirst || first > p.earlyLast {
			break
		}
		changed := p.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-r.closed:
			r.mu.Lock()
			return args
		}
		r.mu.Lock()
	}
	p := r.peerLocked(id, args.Term)
	if p.term != args.Term || p.match < first {
		return args
	}
	k := 0 // args.Entries[k] is the last entry acknowledged
	for k+1 < len(args.Entries) && args.Entries[k+1].Index <= p.match {
		k++
	}
	if k == len(args.Entries)-1 {
		return nil
	}
	trimmed := *args
	trimmed.PrevLogEntry = args.Entries[k].Index
	trimmed.PrevLogTerm = args.Entries[k].Term
	trimmed.Entries = args.Entries[k+1:]
	return &trimmed
}

// peerLocked returns id's progress, reset when term is newer than what it
// holds: what a follower acknowledged to an earlier leader proves nothing
// about this one's log.
func (r *replication) peerLocked(id raft.ServerID, term uint64) *peerProgress {
	p := r.peers[id]
	if p == nil {
		p = &peerProgress{term: term, changed: make(chan struct{})}
		r.peers[id] = p
	}
	if term > p.term {
		ch := p.changed
		*p = peerProgress{term: term, changed: ch}
	}
	return p
}

// changedLocked wakes whoever waits for p to change.
func (p *peerProgress) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// progress returns a copy of id's progress in term (zero values when the
// records are of another term) and the channel closed when it next changes.
func (r *replication) progress(id raft.ServerID, term uint64) (match, told uint64, inflight bool, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.peerLocked(id, term)
	if p.term != term {
		return 0, 0, false, p.changed
	}
	return p.match, p.told, p.inflight > 0, p.changed
}

// RequestPreVote passes pre-vote through; raft enables pre-vote only when
// its transport has this method.
func (r *replication) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	pv, ok := r.Transport.(raft.WithPreVote)
	if !ok {
		return errors.New("node: transport does not support pre-vote")
	}
	return pv.RequestPreVote(id, target, args, resp)
}

// Close closes the wrapped transport when it can be closed (raft closes
// its transport on shutdown).
func (r *replication) Close() error {
	r.closeOnce.Do(func() { close(r.closed) })
	if c, ok := r.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

var (
	_ raft.WithPreVote = (*replication)(nil)
	_ raft.WithClose   = (*replication)(nil)
	_ io.Closer        = (*replication)(nil)
)

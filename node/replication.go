package node

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/logstore"
)

// replication wraps the raft transport of every member. It does these
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
//     append of raft's waits (boundedly) for an early append to that
//     follower on the wire, is sent without the entries the follower has
//     acknowledged in this term, and is answered here, without a round
//     trip, when no entry is left. That answer is true: a follower that
//     acknowledged an entry from this term's leader holds it durably with
//     the leader's log up to it, and no later leader can be elected without
//     that follower's log or a quorum holding the entry (Raft's election
//     restriction), so the entry counts towards its quorum whatever the
//     follower has heard since. raft also takes the answer as contact with
//     the follower (its leader lease), so it is given only from an
//     acknowledgement younger than answerAge; an older one lets raft's
//     append go, and the follower, finding the entries held, stores nothing
//     and answers. This member does not use raft's VerifyLeader, which
//     would count such an answer as a confirmation of leadership
//     (confirmTerm asks every time).
//   - While this member cannot persist its raft state (logstore.Health) it sends
//     no RequestPreVote and no RequestVote: raft counts a failed pre-vote
//     request as refused (preElectSelf, raft.go:2050), so a candidacy that
//     could only end in a failed append never gets past its pre-vote, and
//     the term the others hold is left alone.
//   - While this member cannot persist it also refuses a leader's
//     TimeoutNow (a leadership transfer to it). raft would answer it by
//     campaigning at once, without a pre-vote (runCandidate, raft.go:336),
//     and the term write of that campaign waits for the disk
//     (logstore.Stable), holding raft's main goroutine: the member would
//     neither follow nor lead until the disk came back, and would then
//     depose the leader one term higher. Refused, the leader's transfer
//     fails at once with this member's reason (TransferLeadership).
//   - While a restarted member catches up (catchup.go), it notices when
//     raft has answered a leader's append that named a commit index.
//   - On the leader, it closes every connection to a follower whose
//     heartbeat went unanswered for an election timeout (AppendEntries).
//
// It relies on two behaviours of hashicorp/raft 1.7, each covered by a
// test in replication_test.go: a heartbeat is an append with no entries,
// no previous entry and no commit index; and a successful answer's LastLog
// is the follower's last index, matching the leader's log up to the
// append's last entry.
//
// Concurrency: raft calls the Transport methods from its replication,
// heartbeat and main goroutines at once; the commit tellers and early
// senders call AppendEntries, appendEarly and progress from their own
// goroutines. mu guards peers.
// Consumer starts one goroutine, which passes the received RPCs on to raft
// and ends when raft closes the transport (Close).
type replication struct {
	raft.Transport
	health *logstore.Health

	// answerAge is how old a follower's acknowledgement may be for raft's
	// append to be answered from it; earlyWait is how long raft's append
	// waits for an early append on the wire (see replication).
	answerAge, earlyWait time.Duration
	// sentAppends, trimmedAppends and answeredAppends count raft's appends
	// of entries by what became of them.
	sentAppends, trimmedAppends, answeredAppends prometheus.Counter

	consumeOnce sync.Once
	consumer    chan raft.RPC
	closeOnce   sync.Once
	closed      chan struct{}

	mu    sync.Mutex
	peers map[raft.ServerID]*peerProgress
	// active is when each member became reachable from here: the first
	// successful RPC to it after a failed one, as etcd's transport's
	// ActiveSince. It outlives terms (it is about the link, not the log);
	// a member missing from it is not reachable now. The strict
	// reconfiguration check reads it (reconfig.go).
	active map[raft.ServerID]time.Time
	now    func() time.Time

	// While watchAnswers is set (a restarted member catching up), answered
	// is notified each time raft has answered a leader's append that named
	// a commit index: raft sets its commit index before it answers.
	// firstCommitNamed is the first such index.
	watchAnswers     atomic.Bool
	answered         signal
	firstCommitNamed atomic.Uint64

	// checkAppend, when set, judges every leader's append with entries
	// before raft sees it (fence.go); an error refuses it.
	checkAppend func(*raft.AppendEntriesRequest) error

	// breaker, when the transport has one, closes every connection to a
	// member whose heartbeat has gone unanswered for heartbeatDeadline
	// (see AppendEntries).
	breaker           LinkBreaker
	heartbeatDeadline time.Duration
}

// LinkBreaker is a raft transport that can close every connection it
// dialed to an address (transport.RaftTransport).
type LinkBreaker interface {
	BreakLinks(addr raft.ServerAddress)
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
	// sent is the last index of the entries this leader has sent it, in
	// appends answered or not, and falls back to match when one fails.
	sent uint64
	// ackAt is when it last took an append of this term: how fresh the
	// contact an answer from match would report to raft is.
	ackAt time.Time
	// wire is the early append to it on the wire, nil if none.
	wire *earlyWire
	// changed is closed and replaced whenever an append to it completes.
	changed chan struct{}
}

// earlyWire is an early append on its way: entries first through last,
// done closed once its answer (or failure) is recorded.
type earlyWire struct {
	first, last uint64
	done        chan struct{}
}

func newReplication(t raft.Transport, health *logstore.Health, m *metrics, answerAge, earlyWait time.Duration) *replication {
	r := &replication{Transport: t, health: health, peers: map[raft.ServerID]*peerProgress{},
		active: map[raft.ServerID]time.Time{}, now: time.Now,
		consumer: make(chan raft.RPC), closed: make(chan struct{}),
		answerAge: answerAge, earlyWait: earlyWait,
		sentAppends:     m.raftAppends.WithLabelValues("sent"),
		trimmedAppends:  m.raftAppends.WithLabelValues("trimmed"),
		answeredAppends: m.raftAppends.WithLabelValues("answered"),
	}
	r.breaker, _ = t.(LinkBreaker)
	return r
}

// ErrTransfereeCannotPersist is a member's refusal of a leadership
// transfer while it cannot persist its raft state. It crosses the network
// as text (raft's transports carry an error's message only), so
// TransferLeadership recognises it by its message.
var ErrTransfereeCannotPersist = errors.New("node: the transferee cannot persist its raft state")

// Consumer is raft's stream of received RPCs: the wrapped transport's,
// less the TimeoutNow requests this member refuses (see replication). raft
// calls it once, in NewRaft.
func (r *replication) Consumer() <-chan raft.RPC {
	r.consumeOnce.Do(func() { go r.consume(r.Transport.Consumer()) })
	return r.consumer
}

func (r *replication) consume(in <-chan raft.RPC) {
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-r.closed:
			return
		}
		switch c := rpc.Command.(type) {
		case *raft.TimeoutNowRequest:
			if !r.health.Writable() {
				rpc.Respond(&raft.TimeoutNowResponse{}, ErrTransfereeCannotPersist)
				continue
			}
		case *raft.AppendEntriesRequest:
			if len(c.Entries) > 0 && r.checkAppend != nil {
				if err := r.checkAppend(c); err != nil {
					rpc.Respond(nil, err)
					continue
				}
			}
			if c.LeaderCommitIndex > 0 && r.watchAnswers.Load() {
				r.firstCommitNamed.CompareAndSwap(0, c.LeaderCommitIndex)
				rpc = r.noticeAnswer(rpc)
			}
		}
		select {
		case r.consumer <- rpc:
		case <-r.closed:
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
	}
}

// noticeAnswer returns rpc with its answer passed on through a goroutine
// that notifies answered once raft has given it. Only a catching-up member
// pays for the goroutine.
func (r *replication) noticeAnswer(rpc raft.RPC) raft.RPC {
	answer := make(chan raft.RPCResponse, 1)
	out := rpc.RespChan
	rpc.RespChan = answer
	go func() {
		select {
		case resp := <-answer:
			out <- resp // transports give each RPC a buffered channel of one
			r.answered.Notify()
		case <-r.closed:
		}
	}()
	return rpc
}

// errNoCampaign fails the vote requests of a member that cannot persist.
// (Its text must not contain raft's "unexpected command", which raft takes
// for a peer without pre-vote and counts as a granted pre-vote.)
var errNoCampaign = errors.New("node: not campaigning: this member cannot persist its raft state")

// RequestVote passes a vote request through unless this member cannot
// persist (see replication).
func (r *replication) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if !r.health.Writable() {
		return errNoCampaign
	}
	err := r.Transport.RequestVote(id, target, args, resp)
	r.reached(id, err)
	return err
}

// AppendEntriesPipeline refuses pipelining: raft falls back to one
// synchronous AppendEntries at a time per follower.
func (r *replication) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// AppendEntries is raft's (and the commit teller's): it sends an append,
// or answers raft's from what the follower acknowledged (see replication),
// and records what the answer proves.
func (r *replication) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if args.PrevLogEntry == 0 && len(args.Entries) == 0 && args.LeaderCommitIndex == 0 {
		// A heartbeat. A follower answers it at once, off its raft loop, so
		// one unanswered for an election timeout (by when the follower
		// campaigns, having heard nothing) says the link is stuck, not the
		// follower busy: a link that lost bytes and stayed open leaves an
		// RPC and its answer waiting on both sides until the transport's
		// I/O timeout, 10 s, and with them the follower's replication
		// (etcd's robustness suite's blackhole: the follower had no leader
		// for 9 s after a 1 s fault). Then every connection to the follower
		// is closed, and raft sends again on new ones.
		var timer *time.Timer
		if r.breaker != nil && r.heartbeatDeadline > 0 {
			timer = time.AfterFunc(r.heartbeatDeadline, func() { r.breaker.BreakLinks(target) })
		}
		err := r.Transport.AppendEntries(id, target, args, resp)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			r.unreachable(id, args.Term)
		}
		r.reached(id, err)
		return err
	}
	return r.appendEntries(id, target, args, resp, false)
}

// appendEarly sends an early append (early.go) and records its answer;
// while it is on the wire, raft's append of its entries waits for it.
func (r *replication) appendEarly(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return r.appendEntries(id, target, args, resp, true)
}

func (r *replication) appendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, early bool) error {
	last := args.PrevLogEntry
	if n := len(args.Entries); n > 0 {
		last = args.Entries[n-1].Index
	}
	raftEntries := !early && len(args.Entries) > 0
	r.mu.Lock()
	send := args
	if raftEntries {
		send = r.trimLocked(id, args)
	}
	// Only an append of the records' own term counts as in flight: one of
	// an earlier term (a deposed leader's replicator still winding down
	// when this member leads again) would never be uncounted below.
	p := r.peerLocked(id, args.Term)
	counted := p.term == args.Term && send != nil
	var wire *earlyWire
	if counted {
		p.inflight++
		if len(send.Entries) > 0 {
			p.sent = max(p.sent, last)
		}
		if early && len(args.Entries) > 0 {
			wire = &earlyWire{first: args.Entries[0].Index, last: last, done: make(chan struct{})}
			p.wire = wire
		}
	}
	r.mu.Unlock()

	if raftEntries {
		switch send {
		case nil:
			r.answeredAppends.Inc()
		case args:
			r.sentAppends.Inc()
		default:
			r.trimmedAppends.Inc()
		}
	}
	var err error
	if send == nil {
		// The follower acknowledged every entry: answer as it did.
		*resp = raft.AppendEntriesResponse{
			RPCHeader: raft.RPCHeader{ProtocolVersion: args.ProtocolVersion, ID: []byte(id), Addr: r.EncodePeer(id, target)},
			Term:      args.Term, LastLog: last, Success: true,
		}
		r.mu.Lock()
		r.peerLocked(id, args.Term).changedLocked()
		r.mu.Unlock()
		return nil
	}
	err = r.Transport.AppendEntries(id, target, send, resp)

	r.mu.Lock()
	defer r.mu.Unlock()
	p = r.peerLocked(id, args.Term)
	if counted && p.term == args.Term {
		p.inflight--
	}
	if wire != nil {
		if p.wire == wire {
			p.wire = nil
		}
		close(wire.done)
	}
	if err != nil {
		p.forgetTold(args.Term)
	}
	r.reachedLocked(id, err)
	if err == nil && resp.Success && resp.Term == args.Term && p.term == args.Term {
		p.match = max(p.match, last)
		p.ackAt = r.now()
		// The follower set its commit index to min(LeaderCommitIndex, its
		// last index), and its last index is at least last.
		p.told = max(p.told, min(send.LeaderCommitIndex, last))
	} else if len(send.Entries) > 0 && p.term == args.Term {
		p.sent = p.match
	}
	p.sent = max(p.sent, p.match)
	p.changedLocked()
	return err
}

// trimLocked returns what to send of raft's append args: nil when the
// follower acknowledged all of its entries in args' term, recently enough
// (answerAge), args without those it acknowledged otherwise. It first
// waits, with mu released, while an early append that holds the append's
// first entry is on the wire, for at most earlyWait: that answer decides
// what is left to send. raft reads args again once the call returns (its
// last entry, for the follower's match), so args is not changed; a
// trimmed append is a copy.
func (r *replication) trimLocked(id raft.ServerID, args *raft.AppendEntriesRequest) *raft.AppendEntriesRequest {
	var timeout <-chan time.Time
	for {
		p := r.peerLocked(id, args.Term)
		if p.term != args.Term {
			return args
		}
		if p.match >= args.Entries[len(args.Entries)-1].Index {
			break // all acknowledged
		}
		first := max(args.Entries[0].Index, p.match+1)
		w := p.wire
		if w == nil || first < w.first || first > w.last || r.earlyWait <= 0 {
			break
		}
		if timeout == nil {
			t := time.NewTimer(r.earlyWait)
			defer t.Stop()
			timeout = t.C
		}
		r.mu.Unlock()
		waited := true
		select {
		case <-w.done:
		case <-r.closed:
			waited = false
		case <-timeout:
			waited = false
		}
		r.mu.Lock()
		if !waited {
			break
		}
	}
	p := r.peerLocked(id, args.Term)
	if p.term != args.Term || p.match < args.Entries[0].Index {
		return args
	}
	k := 0 // args.Entries[k] is the last entry acknowledged
	for k+1 < len(args.Entries) && args.Entries[k+1].Index <= p.match {
		k++
	}
	if k == len(args.Entries)-1 {
		if r.now().Sub(p.ackAt) > r.answerAge {
			return args
		}
		return nil
	}
	trimmed := *args
	trimmed.PrevLogEntry = args.Entries[k].Index
	trimmed.PrevLogTerm = args.Entries[k].Term
	trimmed.Entries = args.Entries[k+1:]
	return &trimmed
}

// unreachable notes that an append to id failed in transport: the
// follower may be down, and a follower that restarts forgets every commit
// index it was told (raft keeps none on disk). It keeps what it holds, so
// match stands, but told is reset, and the commit teller tells it again
// as soon as it answers. Without this a restarted follower of an idle
// leader learns the commit index only from raft's next append to it, which
// raft delays after failures (up to seconds of backoff), and serves no
// client until then (catchup.go).
func (r *replication) unreachable(id raft.ServerID, term uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.peerLocked(id, term); p.forgetTold(term) {
		p.changedLocked()
	}
}

// forgetTold resets told after a failed send of term's leader (see
// unreachable), and reports whether it changed.
func (p *peerProgress) forgetTold(term uint64) bool {
	if p.term != term || p.told == 0 {
		return false
	}
	p.told = 0
	return true
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

// sent returns the last index of the entries sent to id in term (see
// peerProgress.sent), 0 when the records are of another term.
func (r *replication) sent(id raft.ServerID, term uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.peerLocked(id, term); p.term == term {
		return p.sent
	}
	return 0
}

// RequestPreVote passes pre-vote through, unless this member cannot
// persist (see replication); raft enables pre-vote only when its transport
// has this method.
func (r *replication) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if !r.health.Writable() {
		return errNoCampaign
	}
	pv, ok := r.Transport.(raft.WithPreVote)
	if !ok {
		return errors.New("node: transport does not support pre-vote")
	}
	err := pv.RequestPreVote(id, target, args, resp)
	r.reached(id, err)
	return err
}

// reached records the outcome of an RPC to id for activeSince: a failure
// makes it unreachable, the first success after that reachable from now.
func (r *replication) reached(id raft.ServerID, err error) {
	r.mu.Lock()
	r.reachedLocked(id, err)
	r.mu.Unlock()
}

func (r *replication) reachedLocked(id raft.ServerID, err error) {
	if err != nil {
		delete(r.active, id)
	} else if _, ok := r.active[id]; !ok {
		r.active[id] = r.now()
	}
}

// activeSince is when id became reachable from this member, and false when
// it is not reachable now (or was never tried).
func (r *replication) activeSince(id raft.ServerID) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.active[id]
	return t, ok
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

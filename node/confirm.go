package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Leadership confirmation: the one linearizable-read path. A read served
// by the leader (ReadBarrier) or through a follower (ReadIndex, asked by
// the follower's transport) waits for a round in which a quorum of voters,
// asked after the read began, said they are still in the leader's term.
// Concurrent reads share rounds (round.Group); quorum counts a round's
// answers and is a pure function of them; probe.go orders whom to ask.

// ReadIndex returns, on the leader, an index such that any member whose
// FSM has applied it (fsm.FSM.WaitApplied) holds every write acknowledged
// before the call began, and every write any member has applied when the
// call began. It confirms leadership first (ReadBarrier), then takes the
// commit index: the leader's own FSM may still be applying it, so the leader
// waits for it too.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	if err := n.ReadBarrier(ctx); err != nil {
		return 0, err
	}
	return n.stateIndex(n.raft.CommitIndex()), nil
}

// stateIndex maps a log index to the last entry at or before it that
// reaches the FSM: raft's no-op, barrier and similar entries change no state
// and never reach it, so waiting for them would wait for the next write.
// They are rare (a few per term); past maxScan of them in a row, or where
// the log is compacted, the leader's FSM index serves.
func (n *Node) stateIndex(commit uint64) uint64 {
	const maxScan = 1024
	var l raft.Log
	for i := commit; i > 0 && commit-i < maxScan; i-- {
		if err := n.logs.GetLog(i, &l); err != nil {
			break
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return i
		}
	}
	return n.fsm.Applied()
}

// ReadBarrier returns once a read of this member's state, made after it
// returns, is linearizable: this member is the leader of the current term,
// has applied every entry of earlier terms, and a quorum has confirmed its
// leadership after the call began. Every write acknowledged before the call
// began was applied on the leader before it was acknowledged, so the local
// state includes it.
//
// Concurrent callers share one leadership confirmation: a caller joins the
// next round that has not started yet, never one already in flight (that
// round's questions may predate the caller, and a newer leader could have
// acknowledged writes since).
func (n *Node) ReadBarrier(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	_, err := n.confirmRounds.Do(ctx)
	return err
}

func (n *Node) verifyOnce() error {
	term := n.raft.CurrentTerm()
	if n.readyTerm.Load() != term {
		// A fresh leader that has not applied its predecessors' entries yet
		// cannot answer; wait briefly for its barrier rather than fail.
		deadline := time.NewTimer(n.cfg.ElectionTimeout)
		defer deadline.Stop()
		for {
			ready, changed := n.ready.Wait(), n.leaderChange.Wait()
			if n.readyTerm.Load() == n.raft.CurrentTerm() {
				break
			}
			if n.raft.State() != raft.Leader {
				return ErrNotLeader
			}
			select {
			case <-ready:
			case <-changed:
			case <-deadline.C:
				return ErrTimeout
			}
		}
		term = n.raft.CurrentTerm()
	}
	if err := n.confirmTerm(term); err != nil {
		return err
	}
	if n.raft.CurrentTerm() != term || n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	return nil
}

// confirmTerm returns nil once a quorum of voters, asked after the call
// began, say they are still in term. A leader of a later term needs votes
// from a quorum, which shares a member with this one, and that member moved
// to the later term before it voted; so no later leader existed, or could
// have acknowledged a write, before the call began. It asks only as many
// voters as a quorum needs, the quickest first, and the others when one
// fails or is slow (probe.go).
//
// raft's VerifyLeader is not enough: it counts any successful replication
// or heartbeat answer that arrives after it was called, including answers
// to requests sent long before. A leader resuming from a pause (SIGSTOP, a
// stalled VM) reads a follower's buffered answer from before the pause,
// "confirms" a leadership it lost meanwhile, and serves a stale read;
// jepsen-lite caught exactly that.
func (n *Node) confirmTerm(term uint64) error {
	n.rmu.Lock()
	prober := n.prober
	n.rmu.Unlock()
	if prober == nil {
		return errors.New("node: leadership check before SetTermProber")
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("node: read configuration: %w", err)
	}
	q, others := newQuorum(f.Configuration().Servers, ServerID(n.cfg.ID), term)
	if q.confirmed() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ElectionTimeout)
	defer cancel()
	type answer struct {
		id   raft.ServerID
		term uint64 // 0: no word from this member
		took time.Duration
	}
	answers := make(chan answer, len(others))
	order := n.probes.order(others)
	asked := 0
	waiting := map[raft.ServerID]bool{}
	ask := func() {
		s := order[asked]
		asked++
		waiting[s.ID] = true
		go func() {
			start := time.Now()
			t, err := prober.Term(ctx, s.Address)
			if err != nil {
				t = 0
			}
			answers <- answer{s.ID, t, time.Since(start)}
		}()
	}
	// Ask as many as a quorum needs; the rest on a failure or the hedge.
	for asked < min(q.missing(), len(order)) {
		ask()
	}
	hedge := time.NewTimer(n.probes.hedge(order[:asked]))
	defer hedge.Stop()
	for len(waiting) > 0 || asked < len(order) {
		select {
		case a := <-answers:
			delete(waiting, a.id)
			switch q.add(a.term) {
			case deposed:
				return ErrNotLeader
			case confirmed:
				n.probes.answered(a.id, a.took)
				return nil
			case counted:
				n.probes.answered(a.id, a.took)
			case noWord:
				n.probes.failed(a.id)
				if asked < len(order) {
					ask()
				}
			}
		case <-hedge.C:
			for id := range waiting {
				n.probes.failed(id) // slow: asked last next time
			}
			for asked < len(order) {
				ask()
			}
		case <-ctx.Done():
			return ErrNotLeader
		}
	}
	// Too few members answered to tell; raft steps this member down if
	// that lasts (LeaderLeaseTimeout), and callers retry meanwhile.
	return ErrNotLeader
}

// quorum counts one confirmation round's answers: the voters of the
// configuration, this member among them, against term. It holds no lock
// and does no I/O; confirmTerm feeds it answers as they arrive.
type quorum struct {
	term       uint64
	need, have int
}

// verdict is what a round knows after one more answer.
type verdict int

const (
	// counted: the answer is in term, and more are needed.
	counted verdict = iota
	// confirmed: a quorum (this member included, if it votes) is in term.
	confirmed
	// deposed: a voter is in a later term; this member's term is over.
	deposed
	// noWord: the voter did not answer, or answered from an older term
	// (which no raft prober does, but a test's may); ask another.
	noWord
)

// newQuorum starts a round for term among servers, counting self's own
// word if self is a voter, and returns the other voters, the ones to ask.
// Non-voters are neither asked nor counted.
func newQuorum(servers []raft.Server, self raft.ServerID, term uint64) (quorum, []raft.Server) {
	q := quorum{term: term}
	var others []raft.Server
	voters := 0
	for _, s := range servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if s.ID == self {
			q.have++
		} else {
			others = append(others, s)
		}
	}
	q.need = voters/2 + 1
	return q, others
}

// add records one voter's answer: the term it is in, 0 for no answer.
func (q *quorum) add(answer uint64) verdict {
	switch {
	case answer > q.term:
		return deposed
	case answer == q.term:
		q.have++
		if q.confirmed() {
			return confirmed
		}
		return counted
	default:
		return noWord
	}
}

func (q *quorum) confirmed() bool { return q.have >= q.need }

// missing is how many more answers in term the round needs.
func (q *quorum) missing() int { return max(q.need-q.have, 0) }

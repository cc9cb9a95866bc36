package node

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// commitNotifyDelay is how long the leader leaves a new commit index to
// raft's own next append, when raft has entries to send that follower,
// before it tells the follower itself. Under write load raft's appends
// follow each other more closely than this and carry the commit index, so
// nothing extra is sent. A follower that already holds every entry hears
// at once: raft would tell it only after its CommitTimeout (up to twice
// --commit-notify-interval), which at low write rates is the delay its
// watchers and serializable readers would see.
const commitNotifyDelay = 500 * time.Microsecond

// serveFollowers runs while this member leads term and keeps, per
// follower of the current configuration, a commit teller (tellCommits) and
// an early sender (sendEarly, fed through e by the log store).
func (n *Node) serveFollowers(ctx context.Context, term uint64, e *earlyReplication) {
	type teller struct {
		addr raft.ServerAddress
		stop context.CancelFunc
	}
	tellers := map[raft.ServerID]teller{}
	defer func() {
		for id, t := range tellers {
			t.stop()
			e.remove(id)
		}
	}()
	// This leader's own membership changes wake it at once; the look every
	// second covers a configuration it inherited still being committed.
	look := time.NewTicker(time.Second)
	defer look.Stop()
	self := ServerID(n.cfg.ID)
	for {
		changed := n.membersChanged.Wait()
		if f := n.raft.GetConfiguration(); f.Error() == nil {
			current := map[raft.ServerID]raft.ServerAddress{}
			for _, s := range f.Configuration().Servers {
				if s.ID != self {
					current[s.ID] = s.Address
				}
			}
			for id, t := range tellers {
				if addr, ok := current[id]; !ok || addr != t.addr {
					t.stop()
					e.remove(id)
					delete(tellers, id)
				}
			}
			for id, addr := range current {
				if _, ok := tellers[id]; !ok {
					tctx, stop := context.WithCancel(ctx)
					tellers[id] = teller{addr: addr, stop: stop}
					go n.tellCommits(tctx, term, id, addr)
					go n.sendEarly(tctx, term, id, addr, e.add(id))
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-look.C:
		case <-changed:
		}
	}
}

// tellCommits sends follower id an empty append carrying the commit index
// whenever it holds committed entries it has not been told of and no append
// to it is in flight (that one's answer is awaited instead), once raft had
// commitNotifyDelay to send it entries of its own.
func (n *Node) tellCommits(ctx context.Context, term uint64, id raft.ServerID, addr raft.ServerAddress) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	sleep := func(d time.Duration, early <-chan struct{}) bool {
		timer.Reset(d)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
		case <-early:
		}
		return true
	}
	waited := false
	var tried uint64 // the last index told ahead of raft's answer
	for {
		committing := n.fsm.Committing()
		match, told, inflight, changed := n.repl.progress(id, term)
		commit := n.raft.CommitIndex()
		target := min(commit, match)
		ahead := min(commit, n.repl.sent(id, term))
		switch {
		case inflight && ahead > max(told, target) && ahead != tried:
			// Committed entries are on their way to it in raft's append,
			// and its raft takes appends one at a time, in the order they
			// arrive: told now, it commits them as soon as it has stored
			// them, where after raft's answer it would wait a round trip
			// more (etcd's leader, too, sends a new commit index while its
			// appends are in flight). The slower follower of each write
			// is in this case, and a client whose write it forwarded
			// waits for it. Should this append overtake raft's (they
			// travel on different connections), the follower refuses it,
			// and the answer to raft's wakes this loop as before.
			tried = ahead
			waited = false
			if err := n.sendCommit(term, id, addr, ahead); err != nil {
				n.log.Debug("telling a follower the commit index ahead of its answer failed", "follower", id, "index", ahead, "err", err)
			}
		case target <= told:
			waited = false
			select {
			case <-ctx.Done():
				return
			case <-committing:
			case <-changed:
			}
		case inflight:
			// Its answer wakes us; raft's next append may follow it.
			waited = false
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		case !waited && n.raft.LastIndex() > match:
			// Raft has entries to send it and will, with the commit index.
			waited = true
			if !sleep(commitNotifyDelay, changed) {
				return
			}
		default:
			waited = false
			if err := n.sendCommit(term, id, addr, target); err != nil {
				// A follower that is down or behind is raft's to repair,
				// and one in a later term will depose this leader; try
				// again after raft's own interval (not on the next change:
				// this very send was one).
				n.log.Debug("telling a follower the commit index failed", "follower", id, "index", target, "err", err)
				if !sleep(n.cfg.CommitNotify, nil) {
					return
				}
			}
		}
	}
}

// sendCommit tells follower id that index, which it holds, is committed.
// The append names index as its previous entry, so the follower checks
// that its log matches ours up to there before it commits anything; it
// carries no entries, and a follower of a later term refuses it.
func (n *Node) sendCommit(term uint64, id raft.ServerID, addr raft.ServerAddress, index uint64) error {
	return n.appendAfter(term, id, addr, index, nil, index, false)
}

// appendAfter sends follower id, as this term's leader, the entries after
// prev (possibly none) with commit as the leader's commit index, and fails
// unless the follower took them. The follower's log must hold prev with
// the term ours has there; commit must be at most prev, which the
// follower's log then matches ours up to. An early append (early.go) is
// marked as one, so that raft's own append of the same entries waits for
// its answer.
func (n *Node) appendAfter(term uint64, id raft.ServerID, addr raft.ServerAddress, prev uint64, entries []*raft.Log, commit uint64, early bool) error {
	var prevTerm uint64
	if prev > 0 {
		var l raft.Log
		if err := n.logs.GetLog(prev, &l); err != nil {
			return fmt.Errorf("node: read log entry %d: %w", prev, err)
		}
		prevTerm = l.Term
	}
	hdr := n.rpcHeader()
	req := &raft.AppendEntriesRequest{
		RPCHeader:         hdr,
		Term:              term,
		Leader:            hdr.Addr,
		PrevLogEntry:      prev,
		PrevLogTerm:       prevTerm,
		Entries:           entries,
		LeaderCommitIndex: commit,
	}
	var resp raft.AppendEntriesResponse
	send := n.repl.AppendEntries
	if early {
		send = n.repl.appendEarly
	}
	if err := send(id, addr, req, &resp); err != nil {
		return err
	}
	if !resp.Success {
		return fmt.Errorf("node: follower refused an append after %d (its term %d, ours %d)", prev, resp.Term, term)
	}
	return nil
}

// rpcHeader is the header raft puts on this member's RPCs.
func (n *Node) rpcHeader() raft.RPCHeader {
	self := ServerID(n.cfg.ID)
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(self), Addr: n.repl.EncodePeer(self, n.repl.LocalAddr())}
}

// heartbeatProber is a leader's own TermProber: it sends the member a raft
// heartbeat (an empty append naming this leader and its term), new for each
// call, and returns the term in the answer. A member in a later term
// refuses it and names its term; one in this term, or an earlier one it
// then leaves, answers with this term. It rides raft's own connections and
// is answered off the member's raft loop (hashicorp's heartbeat fast path),
// which costs a fraction of a gRPC call, and it refreshes the member's
// contact with its leader, which is true.
type heartbeatProber struct{ n *Node }

func (p heartbeatProber) Term(_ context.Context, addr raft.ServerAddress) (uint64, error) {
	n := p.n
	term := n.raft.CurrentTerm()
	// A member that stepped down keeps its term; it must not announce
	// itself as that term's leader.
	if n.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	hdr := n.rpcHeader()
	req := &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term, Leader: hdr.Addr}
	var resp raft.AppendEntriesResponse
	if err := n.repl.Transport.AppendEntries("", addr, req, &resp); err != nil {
		return 0, fmt.Errorf("node: heartbeat to %s: %w", addr, err)
	}
	return resp.Term, nil
}

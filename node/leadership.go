// Leadership: which member leads (Leader, LeaderChange), and what runs
// while this member does. Per-term leader state lives in the services
// added with AddLeaderService: lead builds their term when raft reports
// leadership and this member has applied its predecessors' entries, and
// cancels it the moment leadership ends. followLeader turns raft's lossy
// observations into a reliable signal: an observation only says "look
// again", and the leader is always read from raft itself.

package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// LeaderService is leader-only machinery. Run is started after the new
// leader has applied every entry of earlier terms (a barrier), so it never
// acts on a stale FSM, and ctx is cancelled the moment leadership is lost.
// Run must return promptly after ctx is done.
type LeaderService interface {
	Run(ctx context.Context, term uint64)
}

// AddLeaderService registers machinery that runs only while this member
// leads. Register before Start for it to see every term.
func (n *Node) AddLeaderService(s LeaderService) {
	n.smu.Lock()
	n.services = append(n.services, s)
	n.smu.Unlock()
}

// watchLeadership turns raft's leadership notifications into the leader
// term's lifetime: barrier first, then leader services, all cancelled on loss.
func (n *Node) watchLeadership(notify <-chan bool) {
	defer n.done.Done()
	var cancel context.CancelFunc
	var wg sync.WaitGroup
	stepDown := func() {
		n.readyTerm.Store(0)
		n.ready.Notify()
		if cancel != nil {
			cancel()
			wg.Wait()
			cancel = nil
		}
	}
	defer stepDown()
	for {
		select {
		case <-n.stop:
			return
		case leader := <-notify:
			stepDown()
			if !leader {
				n.log.Info("lost leadership")
				continue
			}
			ctx, stop := context.WithCancel(context.Background())
			cancel = stop
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.lead(ctx)
			}()
		}
	}
}

func (n *Node) lead(ctx context.Context) {
	term := n.raft.CurrentTerm()
	for {
		// The barrier applies every entry of earlier terms on this member,
		// so reads and leader services see everything ever acknowledged.
		err := await(ctx, n.raft.Barrier(n.cfg.ElectionTimeout*5))
		if err == nil {
			break
		}
		if ctx.Err() != nil || n.raft.State() != raft.Leader {
			return
		}
		n.log.Warn("leader barrier failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	if n.raft.CurrentTerm() != term {
		return
	}
	// A history's first leader names it before anything else it does, so
	// its members state it in every raft handshake from then on (fence.go).
	if err := n.newIncarnation(ctx); err != nil && ctx.Err() == nil {
		n.log.Warn("cluster incarnation not committed; the next term tries again", "err", err)
	}
	n.readyTerm.Store(term)
	n.ready.Notify()
	n.log.Info("leading", "term", term, "applied", n.raft.AppliedIndex())
	n.smu.Lock()
	services := slices.Clone(n.services)
	n.smu.Unlock()
	// The term's early replication (early.go): the log store offers it
	// this term's entries from now until the term ends here.
	e := newEarlyReplication(term)
	n.early.Store(e)
	defer n.early.CompareAndSwap(e, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n.serveFollowers(ctx, term, e)
	}()
	for _, s := range services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Run(ctx, term)
		}()
	}
	wg.Wait()
}

// Term is the current raft term.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// IsLeader reports whether this member is the raft leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// ReadyChange returns a channel closed at the next change of whether this
// member, as leader, has applied every entry of earlier terms (the
// barrier that starts each term): a caller that found the leader not
// ready yet waits on it, after taking it and before looking again.
func (n *Node) ReadyChange() <-chan struct{} { return n.ready.Wait() }

// Ready reports whether this member leads and has applied every entry of
// earlier terms.
func (n *Node) Ready() bool {
	t := n.readyTerm.Load()
	return t != 0 && t == n.raft.CurrentTerm() && n.raft.State() == raft.Leader
}

// Leader returns the current leader's member ID and raft (peer) address, or
// zero and "" when there is none known.
func (n *Node) Leader() (uint64, string) {
	addr, sid := n.leader()
	if sid == "" {
		return 0, ""
	}
	id, err := ParseServerID(sid)
	if err != nil {
		return 0, ""
	}
	return id, string(addr)
}

// leader is raft's leader, except that a candidate has none. raft 1.7 keeps
// the leader it last heard from on a candidate that a leadership transfer
// started (the old leader's appends reach it while it campaigns, and do not
// turn it back into a follower), so after that leader stops, raft would
// name it for as long as the election goes on.
func (n *Node) leader() (raft.ServerAddress, raft.ServerID) {
	addr, sid := n.raft.LeaderWithID()
	if n.raft.State() == raft.Candidate {
		return "", ""
	}
	return addr, sid
}

// followLeader follows raft's leader and state observations until stop
// closes: each one is a hint to read the leader again (Leader's view, so a
// candidate has none). It counts new leaders, as etcd's leader_changes_seen
// does, and wakes LeaderChange waiters on every change, including to no
// leader.
func (n *Node) followLeader(ch chan raft.Observation) {
	defer n.done.Done()
	var last, lastKnown raft.ServerID
	for {
		select {
		case <-n.stop:
			return
		case <-ch:
		}
		_, id := n.leader()
		n.clusterTime.observe(id != "", time.Now(), n.cfg.ElectionTimeout)
		if id == last {
			continue
		}
		last = id
		n.leaderChange.Notify()
		if id != "" && id != lastKnown {
			lastKnown = id
			n.metrics.leaderChanges.Inc()
		}
	}
}

// LeaderChange returns a channel closed at the next change of the leader
// this member knows of (including to none). A member forwarding a request
// takes it before looking the leader up, and gives up on the request when
// it closes: a leader that died without closing its connections (a host
// gone, not a process) would otherwise hold the request until its deadline.
func (n *Node) LeaderChange() <-chan struct{} {
	return n.leaderChange.Wait()
}

// await waits for f until ctx ends. raft answers a future it has dequeued,
// even when it then shuts down, but never one still queued at shutdown
// (Barrier and configuration changes leave its ShutdownCh unset): a bare
// f.Error() from a leader service can then block forever, and with it
// Close, which waits for the services (a node test hung so in CI). The
// goroutine waiting on such a future outlives the call; it ends with the
// process, as the future never resolves.
func await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

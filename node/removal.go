package node

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// ErrRemoved is returned when a member starts on data of a member the
// cluster has removed; such a member must be wiped and added again.
var ErrRemoved = errors.New("node: this member was removed from the cluster; remove its data dir and add it again (etcdctl member add) to rejoin")

// Removed is closed once this member learns it is no longer in the cluster:
// the leader told it, it applied a configuration without itself, or, as the
// leader, raft shut down after committing its own removal. The process
// should stop; its state will not change any more.
func (n *Node) Removed() <-chan struct{} { return n.removed }

// MarkRemoved records that the cluster removed this member.
func (n *Node) MarkRemoved(how string) {
	n.removedOnce.Do(func() {
		n.log.Warn("this member was removed from the cluster", "how", how)
		close(n.removed)
	})
}

// inConfiguration reports whether the latest configuration raft knows of
// has this member, and whether raft knows of one at all (a member started
// to join has none until the leader replicates it).
func (n *Node) inConfiguration() (in, known bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return true, false
	}
	servers := f.Configuration().Servers
	for _, s := range servers {
		if s.ID == ServerID(n.cfg.ID) {
			return true, true
		}
	}
	return false, len(servers) > 0
}

// watchRemoval polls for removal: raft offers no notification of it, and a
// removed follower may never see the entry that removed it (the leader
// stops replicating to it), which is why the leader also tells it.
func (n *Node) watchRemoval() {
	defer n.done.Done()
	t := time.NewTicker(n.cfg.ElectionTimeout)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.removed:
			return
		case <-t.C:
		}
		in, known := n.inConfiguration()
		if in && known {
			n.joined.Store(true)
		}
		how := removal(n.raft.State() == raft.Shutdown, in, known, n.joined.Load())
		if how == "" {
			continue
		}
		select {
		case <-n.stop: // Close shut raft down, nobody removed us
			return
		default:
			n.MarkRemoved(how)
		}
	}
}

// removal says how a member learned it was removed, or "" if it was not:
// raft shut down on its own (a leader commits its own removal so), or the
// member holds a configuration without itself after one with itself. Only
// the second counts as removal: a member joining a running cluster first
// applies the leader's snapshot, whose configuration may be older than the
// entry that added it.
func removal(shutdown, in, known, joined bool) string {
	switch {
	case shutdown:
		return "raft shut down after committing this member's removal"
	case known && !in && joined:
		return "applied a configuration without this member"
	}
	return ""
}

// Membership: the cluster's members as raft's configuration and the FSM's
// published attributes join them, and the configuration changes
// (add, remove, leadership transfer) a leader makes. removal.go handles
// this member's own removal.

package node

import (
	"errors"
	"fmt"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/hashicorp/raft"
)

// Members lists the cluster's members: raft's configuration joined with what
// each member published about itself.
func (n *Node) Members() ([]*pb.Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("node: read configuration: %w", err)
	}
	var out []*pb.Member
	for _, s := range f.Configuration().Servers {
		id, err := ParseServerID(s.ID)
		if err != nil {
			continue
		}
		m := &pb.Member{ID: id, IsLearner: s.Suffrage != raft.Voter}
		if pm := n.fsm.Member(id); pm != nil {
			m.Name, m.ClientURLs, m.PeerURLs = pm.Name, pm.ClientURLs, pm.PeerURLs
		}
		if len(m.PeerURLs) == 0 {
			m.PeerURLs = []string{n.peerScheme() + "://" + string(s.Address)}
		}
		out = append(out, m)
	}
	return out, nil
}

func (n *Node) peerScheme() string {
	if len(n.cfg.PeerURLs) > 0 && strings.HasPrefix(n.cfg.PeerURLs[0], "https://") {
		return "https"
	}
	return "http"
}

// Self is what this member publishes about itself.
func (n *Node) Self() *pb.Member {
	return &pb.Member{ID: n.cfg.ID, Name: n.cfg.Name, PeerURLs: n.cfg.PeerURLs, ClientURLs: n.cfg.ClientURLs}
}

// AddMember adds a voting member with the given peer URLs and returns it.
// Leader only.
func (n *Node) AddMember(peerURLs []string, id uint64, addr string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if err := n.raft.AddVoter(ServerID(id), raft.ServerAddress(addr), 0, 10*n.cfg.ElectionTimeout).Error(); err != nil {
		return fmt.Errorf("node: add member %x: %w", id, err)
	}
	return nil
}

// RemoveMember removes a member. Leader only.
func (n *Node) RemoveMember(id uint64) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if err := n.raft.RemoveServer(ServerID(id), 0, 10*n.cfg.ElectionTimeout).Error(); err != nil {
		return fmt.Errorf("node: remove member %x: %w", id, err)
	}
	return nil
}

// TransferLeadership hands leadership to member id. Leader only. Moving it
// to the leader itself succeeds at once, so a retried move is harmless.
func (n *Node) TransferLeadership(id uint64) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if id == n.cfg.ID {
		return nil
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("node: read configuration: %w", err)
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == ServerID(id) {
			if err := n.raft.LeadershipTransferToServer(s.ID, s.Address).Error(); err != nil {
				// raft gives both as text: the transferee's refusal crossed
				// the network, and the timeout has no sentinel (raft.go:730).
				switch {
				case strings.Contains(err.Error(), ErrTransfereeCannotPersist.Error()):
					return fmt.Errorf("%w: member %x: %w", ErrBadTransferee, id, ErrTransfereeCannotPersist)
				case strings.Contains(err.Error(), "leadership transfer timeout"):
					return fmt.Errorf("%w: member %x did not catch up and win an election within the election timeout", ErrTransferTimeout, id)
				}
				return fmt.Errorf("node: transfer leadership to %x: %w", id, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: member %x is not in the cluster", ErrBadTransferee, id)
}

// ErrBadTransferee refuses to move leadership to a member the cluster does
// not have, or to one that cannot persist its raft state (etcd's "bad
// leader transferee").
var ErrBadTransferee = errors.New("node: bad leadership transferee")

// ErrTransferTimeout is a leadership transfer that did not complete within
// the election timeout (etcd's "leader transfer took too long"); the leader
// still leads.
var ErrTransferTimeout = errors.New("node: leadership transfer timed out")

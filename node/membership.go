// Membership: the cluster's members as raft's configuration and the FSM's
// member records join them, and leadership transfer. reconfig.go changes
// the membership, promote.go promotes the voters it added as non-voters,
// removal.go handles this member's own removal.
//
// A member is one of three kinds, and raft's configuration with the
// member's record (fsm.OpMember) tells which:
//
//   - a voter: a raft voter;
//   - a learner (etcd's word): a raft non-voter recorded as a learner, or
//     with no record. It receives the log and serves reads, and votes only
//     once MemberPromote makes it a voter;
//   - a voter still catching up: a raft non-voter recorded as a voter.
//     MemberAdd adds every voter this way, and the leader makes it a raft
//     voter once it holds the committed log (promote.go). Clients see it as
//     a voter (IsLearner false), as etcd shows a voter it has just added;
//     unlike etcd, the quorum grows only when the new member can take part
//     in it, so adding a member that never starts costs no availability,
//     and a one-member cluster answers its MemberAdd.

package node

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/hashicorp/raft"
)

// memberView is one member of raft's configuration with the FSM's record
// of it (nil when there is none: an initial member that has not published
// yet).
type memberView struct {
	id     uint64
	server raft.Server
	rec    *pb.Member
	// reached is set by the strict reconfiguration check for this member
	// and every member this leader reaches now (withReach).
	reached bool
}

func (v memberView) voter() bool { return v.server.Suffrage == raft.Voter }

// learner reports whether the member is a learner as etcd's clients see
// it: a non-voter that was not added as a voter.
func (v memberView) learner() bool { return !v.voter() && (v.rec == nil || v.rec.IsLearner) }

// staged reports whether the member was added as a voter and waits for
// promote.go to make it one.
func (v memberView) staged() bool { return !v.voter() && v.rec != nil && !v.rec.IsLearner }

// started reports whether the member has started, as etcd's IsStarted: it
// has published its name, or (etcd names the initial members before they
// start; corenode learns a name only when the member publishes it) the
// leader reaches it now.
func (v memberView) started() bool { return v.reached || (v.rec != nil && v.rec.Name != "") }

// peerURLs are the member's recorded peer URLs, or its raft address as one.
func (v memberView) peerURLs(scheme string) []string {
	if v.rec != nil && len(v.rec.PeerURLs) > 0 {
		return v.rec.PeerURLs
	}
	return []string{scheme + "://" + string(v.server.Address)}
}

func (v memberView) member(scheme string) *pb.Member {
	m := &pb.Member{ID: v.id, IsLearner: v.learner(), PeerURLs: v.peerURLs(scheme)}
	if v.rec != nil {
		m.Name, m.ClientURLs = v.rec.Name, v.rec.ClientURLs
	}
	return m
}

// configuration is raft's latest configuration (the one a leader acts on,
// committed or not), joined with the member records, and its log index.
func (n *Node) configuration() ([]memberView, uint64, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, 0, fmt.Errorf("node: read configuration: %w", err)
	}
	var out []memberView
	for _, s := range f.Configuration().Servers {
		id, err := ParseServerID(s.ID)
		if err != nil {
			continue
		}
		out = append(out, memberView{id: id, server: s, rec: n.fsm.Member(id)})
	}
	return out, f.Index(), nil
}

// Members lists the cluster's members: raft's configuration joined with
// the member records.
func (n *Node) Members() ([]*pb.Member, error) {
	views, _, err := n.configuration()
	if err != nil {
		return nil, err
	}
	out := make([]*pb.Member, 0, len(views))
	for _, v := range views {
		out = append(out, v.member(n.peerScheme()))
	}
	return out, nil
}

// VoterIDs lists raft's voters: the members a quorum is counted among
// (learners and voters still catching up are not).
func (n *Node) VoterIDs() ([]uint64, error) {
	views, _, err := n.configuration()
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, v := range views {
		if v.voter() {
			ids = append(ids, v.id)
		}
	}
	return ids, nil
}

// IsLearner reports whether this member is a learner (see memberView).
func (n *Node) IsLearner() bool {
	views, _, err := n.configuration()
	if err != nil {
		return false
	}
	i := slices.IndexFunc(views, func(v memberView) bool { return v.id == n.cfg.ID })
	return i >= 0 && views[i].learner()
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

// raftAddress is the raft address (host:port) of a member's peer URLs:
// the first one's.
func raftAddress(peerURLs []string) (raft.ServerAddress, error) {
	if len(peerURLs) == 0 {
		return "", fmt.Errorf("%w: no peer URL", ErrBadPeerURLs)
	}
	for _, raw := range peerURLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Port() == "" {
			return "", fmt.Errorf("%w: %q is not http(s)://host:port", ErrBadPeerURLs, raw)
		}
	}
	u, _ := url.Parse(peerURLs[0])
	return raft.ServerAddress(u.Host), nil
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
	views, _, err := n.configuration()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(views, func(v memberView) bool { return v.id == id })
	if i < 0 {
		return fmt.Errorf("%w: member %x is not in the cluster", ErrBadTransferee, id)
	}
	s := views[i].server
	if !views[i].voter() {
		return fmt.Errorf("%w: member %x does not vote (a learner, or a voter still catching up)", ErrBadTransferee, id)
	}
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

// ErrBadTransferee refuses to move leadership to a member the cluster does
// not have, to one that does not vote, or to one that cannot persist its
// raft state (etcd's "bad leader transferee").
var ErrBadTransferee = errors.New("node: bad leadership transferee")

// ErrTransferTimeout is a leadership transfer that did not complete within
// the election timeout (etcd's "leader transfer took too long"); the leader
// still leads.
var ErrTransferTimeout = errors.New("node: leadership transfer timed out")

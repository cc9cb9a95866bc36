// Membership changes, on the leader: add (as a voter or a learner),
// remove, promote a learner, change a member's peer URLs. Each is checked
// as etcd checks it (its errors, its strict reconfiguration check), then
// recorded in the FSM where the record matters (fsm.OpMember) and made in
// raft's configuration.

package node

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/fsm"
)

// Membership errors; transport maps each to etcd's.
var (
	ErrMemberNotFound  = errors.New("node: member not found")
	ErrPeerURLExists   = errors.New("node: peer URL exists")
	ErrBadPeerURLs     = errors.New("node: given member URLs are invalid")
	ErrMemberNotLearn  = errors.New("node: can only promote a learner member")
	ErrLearnerNotReady = errors.New("node: can only promote a learner member which is in sync with leader")
	ErrTooManyLearners = errors.New("node: too many learner members in cluster")
	// ErrNotEnoughStarted refuses a change that would leave fewer started
	// voters than a quorum (etcd's "re-configuration failed due to not
	// enough started members"), and removing the last voter.
	ErrNotEnoughStarted = errors.New("node: re-configuration failed due to not enough started members")
	// ErrUnhealthy refuses a change while the leader has not been
	// connected to enough voters for HealthInterval (etcd's "unhealthy
	// cluster").
	ErrUnhealthy = errors.New("node: unhealthy cluster")
)

// HealthInterval is how long the leader must have reached a voter before
// the strict reconfiguration check counts it as connected, etcd's.
const HealthInterval = 5 * time.Second

// readyFraction of the leader's log a learner must hold to be promoted
// (etcd's 90 %).
const readyFraction = 0.9

// DefaultMaxLearners is etcd's --max-learners default.
const DefaultMaxLearners = 1

// AddMember adds a member reached at peerURLs, as a learner or as a voter,
// and returns it with the ID the cluster gave it. Leader only.
//
// A voter joins raft as a non-voter and becomes a voter once it holds the
// committed log (promote.go): the quorum grows only when the new member can
// be part of it. The call returns once the member's record and raft's
// configuration with it are committed.
func (n *Node) AddMember(ctx context.Context, peerURLs []string, learner bool) (*pb.Member, error) {
	addr, err := raftAddress(peerURLs)
	if err != nil {
		return nil, err
	}
	return n.addMember(ctx, 0, addr, peerURLs, learner)
}

// addMember is AddMember with the raft address given, and the ID too
// unless it is zero (tests that run raft over in-memory transports).
func (n *Node) addMember(ctx context.Context, id uint64, addr raft.ServerAddress, peerURLs []string, learner bool) (*pb.Member, error) {
	if n.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	views, index, err := n.configuration()
	if err != nil {
		return nil, err
	}
	if err := n.urlTaken(views, addr, peerURLs, 0); err != nil {
		return nil, err
	}
	if learner {
		count := 0
		for _, v := range views {
			if v.learner() {
				count++
			}
		}
		if count >= n.maxLearners() {
			return nil, fmt.Errorf("%w: %d of at most %d (--max-learners)", ErrTooManyLearners, count, n.maxLearners())
		}
	}
	if n.cfg.StrictReconfigCheck {
		if !learner && !readyToAdd(n.withReach(views)) {
			return nil, ErrNotEnoughStarted
		}
		if !n.connectedFully(ctx, views) {
			return nil, ErrUnhealthy
		}
	}
	if id == 0 {
		id = n.newMemberID(peerURLs, views)
	}
	m := &pb.Member{ID: id, PeerURLs: peerURLs, IsLearner: learner}
	if _, err := n.Propose(ctx, fsm.OpMember, m); err != nil {
		return nil, fmt.Errorf("node: record member %x: %w", id, err)
	}
	if err := n.raft.AddNonvoter(ServerID(id), addr, index, n.reconfigTimeout()).Error(); err != nil {
		return nil, fmt.Errorf("node: add member %x: %w", id, err)
	}
	n.log.Info("added member", "id", fmt.Sprintf("%x", id), "peer-urls", peerURLs, "learner", learner)
	n.membersChanged.Notify()
	return m, nil
}

// memberAt is the configuration this leader acts on and the place in it
// of member id (ErrMemberNotFound when it has none).
func (n *Node) memberAt(id uint64) (views []memberView, index uint64, i int, err error) {
	if n.raft.State() != raft.Leader {
		return nil, 0, 0, ErrNotLeader
	}
	if views, index, err = n.configuration(); err != nil {
		return nil, 0, 0, err
	}
	if i = slices.IndexFunc(views, func(v memberView) bool { return v.id == id }); i < 0 {
		return nil, 0, 0, fmt.Errorf("%w: %x", ErrMemberNotFound, id)
	}
	return views, index, i, nil
}

// urlTaken refuses peer URLs (or a raft address) a member other than
// except already has.
func (n *Node) urlTaken(views []memberView, addr raft.ServerAddress, peerURLs []string, except uint64) error {
	scheme := n.peerScheme()
	for _, v := range views {
		if v.id != except && (v.server.Address == addr || slices.ContainsFunc(v.peerURLs(scheme), func(u string) bool { return slices.Contains(peerURLs, u) })) {
			return fmt.Errorf("%w: member %x has %s", ErrPeerURLExists, v.id, addr)
		}
	}
	return nil
}

// RemoveMember removes member id. Leader only.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	views, index, i, err := n.memberAt(id)
	if err != nil {
		return err
	}
	if views[i].voter() && voters(views) == 1 {
		return fmt.Errorf("%w: member %x is the last voter", ErrNotEnoughStarted, id)
	}
	if n.cfg.StrictReconfigCheck && !views[i].learner() {
		if !readyToRemove(n.withReach(views), id) {
			return ErrNotEnoughStarted
		}
		// A member this leader cannot reach is not part of the active
		// quorum: removing it takes nothing from it.
		if _, up := n.repl.activeSince(views[i].server.ID); up || id == n.cfg.ID {
			if active := n.connectedSince(ctx, views); active-1 < 1+(votingView(views)-1)/2 {
				return ErrUnhealthy
			}
		}
	}
	if err := n.raft.RemoveServer(ServerID(id), index, n.reconfigTimeout()).Error(); err != nil {
		return fmt.Errorf("node: remove member %x: %w", id, err)
	}
	n.log.Info("removed member", "id", fmt.Sprintf("%x", id))
	n.membersChanged.Notify()
	return nil
}

// PromoteMember makes learner id a voter once it holds most of the leader's
// log (etcd's rule: 90 %). Leader only.
func (n *Node) PromoteMember(ctx context.Context, id uint64) error {
	term := n.raft.CurrentTerm()
	views, index, i, err := n.memberAt(id)
	if err != nil {
		return err
	}
	v := views[i]
	if !v.learner() {
		return fmt.Errorf("%w: member %x", ErrMemberNotLearn, id)
	}
	match, _, _, _ := n.repl.progress(v.server.ID, term)
	if last := n.raft.LastIndex(); float64(match) < readyFraction*float64(last) {
		return fmt.Errorf("%w: member %x holds the log to %d of %d", ErrLearnerNotReady, id, match, last)
	}
	if n.cfg.StrictReconfigCheck && !readyToPromote(n.withReach(views)) {
		return ErrNotEnoughStarted
	}
	rec := &pb.Member{ID: id, PeerURLs: v.peerURLs(n.peerScheme())}
	if _, err := n.Propose(ctx, fsm.OpMember, rec); err != nil {
		return fmt.Errorf("node: record member %x as a voter: %w", id, err)
	}
	if err := n.raft.AddVoter(v.server.ID, v.server.Address, index, n.reconfigTimeout()).Error(); err != nil {
		return fmt.Errorf("node: promote member %x: %w", id, err)
	}
	n.log.Info("promoted learner", "id", fmt.Sprintf("%x", id))
	n.membersChanged.Notify()
	return nil
}

// UpdateMember changes member id's peer URLs: where the others reach it.
// The member itself must be restarted to listen there. Leader only.
func (n *Node) UpdateMember(ctx context.Context, id uint64, peerURLs []string) error {
	addr, err := raftAddress(peerURLs)
	if err != nil {
		return err
	}
	views, index, i, err := n.memberAt(id)
	if err != nil {
		return err
	}
	if err := n.urlTaken(views, addr, peerURLs, id); err != nil {
		return err
	}
	v := views[i]
	rec := &pb.Member{ID: id, PeerURLs: peerURLs, IsLearner: v.rec != nil && v.rec.IsLearner}
	if v.rec == nil {
		rec.IsLearner = v.learner()
	}
	if _, err := n.Propose(ctx, fsm.OpMember, rec); err != nil {
		return fmt.Errorf("node: record member %x's peer URLs: %w", id, err)
	}
	if v.server.Address != addr {
		// Either call keeps the member's suffrage and changes its address.
		change := n.raft.AddNonvoter
		if v.voter() {
			change = n.raft.AddVoter
		}
		if err := change(v.server.ID, addr, index, n.reconfigTimeout()).Error(); err != nil {
			return fmt.Errorf("node: change member %x's address: %w", id, err)
		}
	}
	n.log.Info("updated member", "id", fmt.Sprintf("%x", id), "peer-urls", peerURLs)
	n.membersChanged.Notify()
	return nil
}

// withReach marks in views this member and the members it reaches now.
func (n *Node) withReach(views []memberView) []memberView {
	for i := range views {
		_, up := n.repl.activeSince(views[i].server.ID)
		views[i].reached = up || views[i].id == n.cfg.ID
	}
	return views
}

func (n *Node) reconfigTimeout() time.Duration { return 10 * n.cfg.ElectionTimeout }

func (n *Node) maxLearners() int {
	if n.cfg.MaxLearners > 0 {
		return n.cfg.MaxLearners
	}
	return DefaultMaxLearners
}

// newMemberID gives an added member an ID no member has: derived from its
// peer URLs, the cluster token and the time, as etcd derives one, so a
// member removed and added again at the same URLs is a new member.
func (n *Node) newMemberID(peerURLs []string, views []memberView) uint64 {
	salt := n.cfg.ClusterToken + "/" + strconv.FormatInt(time.Now().UnixNano(), 10)
	for {
		id := MemberID(peerURLs, salt)
		if !slices.ContainsFunc(views, func(v memberView) bool { return v.id == id }) {
			return id
		}
		h := sha256.Sum256([]byte(salt))
		salt = strconv.FormatUint(binary.BigEndian.Uint64(h[:8]), 16)
	}
}

// The strict reconfiguration check (etcd's --strict-reconfig-check): a
// change must leave a quorum of started voters, and the leader must have
// been connected to the voters for HealthInterval. "Voters" here are etcd's
// voting members: raft's voters and the voters still catching up.

// votingView counts etcd's voting members.
func votingView(views []memberView) int {
	members, _ := startedVoters(views, 0)
	return members
}

// voters counts raft's voters.
func voters(views []memberView) int {
	c := 0
	for _, v := range views {
		if v.voter() {
			c++
		}
	}
	return c
}

// startedVoters counts etcd's voting members other than except, and those
// of them that have started.
func startedVoters(views []memberView, except uint64) (members, started int) {
	for _, v := range views {
		if v.learner() || (except != 0 && v.id == except) {
			continue
		}
		members++
		if v.started() {
			started++
		}
	}
	return members, started
}

// readyToAdd: the voters after the add, counting the new one as started
// only for a one-member cluster (restoring a cluster's data), leave a
// quorum started.
func readyToAdd(views []memberView) bool {
	members, started := startedVoters(views, 0)
	members++
	if started == 1 && members == 2 {
		return true
	}
	return started >= members/2+1
}

// readyToRemove: the voters left after removing id have a quorum started.
func readyToRemove(views []memberView, id uint64) bool {
	members, started := startedVoters(views, id)
	return started >= members/2+1
}

// readyToPromote: the voters after promoting one learner (counted as
// started) have a quorum started.
func readyToPromote(views []memberView) bool {
	members, started := startedVoters(views, 0)
	return started+1 >= (members+1)/2+1
}

// connectedFully reports whether every other voter has been connected
// for at least HealthInterval (connectedSince).
func (n *Node) connectedFully(ctx context.Context, views []memberView) bool {
	return n.connectedSince(ctx, views) == votingView(views)
}

// connectedSince counts the voters, this member included, connected for at
// least HealthInterval: this leader reaches them now, and has without a
// failure for that long, or they have been in the cluster that long
// (clusterage.go: a leader elected a moment ago has reached its followers
// only since).
func (n *Node) connectedSince(ctx context.Context, views []memberView) int {
	c := 0
	before := n.repl.now().Add(-HealthInterval)
	var ask []raft.Server
	for _, v := range views {
		if v.learner() {
			continue
		}
		if v.id == n.cfg.ID {
			c++
			continue
		}
		since, up := n.repl.activeSince(v.server.ID)
		switch {
		case !up:
		case !since.After(before):
			c++
		default:
			ask = append(ask, v.server)
		}
	}
	return c + len(n.peersInCluster(ctx, ask))
}

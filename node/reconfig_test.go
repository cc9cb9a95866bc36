package node

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/hashicorp/raft"
)

// views builds a configuration: v voters and l learners, the first
// started of each kind published (or reached).
func views(voters, started, learners int) []memberView {
	var out []memberView
	for i := range voters {
		v := memberView{id: uint64(i + 1), server: raft.Server{Suffrage: raft.Voter}}
		if i < started {
			v.rec = &pb.Member{Name: "m"}
		}
		out = append(out, v)
	}
	for i := range learners {
		out = append(out, memberView{id: uint64(100 + i), server: raft.Server{Suffrage: raft.Nonvoter}, rec: &pb.Member{IsLearner: true, Name: "l"}})
	}
	return out
}

// TestStrictChecks holds the quorum arithmetic of the strict
// reconfiguration check to etcd's (membership/cluster.go's
// IsReadyToAddVotingMember, IsReadyToRemoveVotingMember and
// IsReadyToPromoteMember); learners never count.
func TestStrictChecks(t *testing.T) {
	for _, tc := range []struct {
		voters, started, learners int
		add, remove, promote      bool
	}{
		{voters: 1, started: 1, add: true, remove: false, promote: true},
		{voters: 3, started: 3, add: true, remove: true, promote: true},
		{voters: 3, started: 2, add: false, remove: false, promote: true},
		{voters: 3, started: 1, add: false, remove: false, promote: false},
		{voters: 5, started: 3, add: false, remove: false, promote: true},
		{voters: 5, started: 4, add: true, remove: true, promote: true},
		{voters: 4, started: 3, add: true, remove: true, promote: true},
		{voters: 3, started: 3, learners: 1, add: true, remove: true, promote: true},
	} {
		vs := views(tc.voters, tc.started, tc.learners)
		// Remove a started voter: the one that leaves counts for nothing.
		if got := readyToAdd(vs); got != tc.add {
			t.Errorf("%+v: readyToAdd = %v", tc, got)
		}
		if got := readyToRemove(vs, 1); got != tc.remove {
			t.Errorf("%+v: readyToRemove = %v", tc, got)
		}
		if got := readyToPromote(vs); got != tc.promote {
			t.Errorf("%+v: readyToPromote = %v", tc, got)
		}
	}
}

// TestMemberKinds: a non-voter is a learner unless its record says it was
// added as a voter; then it is staged, and clients see a voter.
func TestMemberKinds(t *testing.T) {
	for _, tc := range []struct {
		name            string
		v               memberView
		learner, staged bool
		shownAsLearner  bool
	}{
		{"voter", memberView{server: raft.Server{Suffrage: raft.Voter}}, false, false, false},
		{"learner", memberView{server: raft.Server{Suffrage: raft.Nonvoter}, rec: &pb.Member{IsLearner: true}}, true, false, true},
		{"non-voter without a record", memberView{server: raft.Server{Suffrage: raft.Nonvoter}}, true, false, true},
		{"voter catching up", memberView{server: raft.Server{Suffrage: raft.Nonvoter}, rec: &pb.Member{}}, false, true, false},
		{"promoted learner", memberView{server: raft.Server{Suffrage: raft.Voter}, rec: &pb.Member{IsLearner: true}}, false, false, false},
	} {
		if tc.v.learner() != tc.learner || tc.v.staged() != tc.staged || tc.v.member("http").IsLearner != tc.shownAsLearner {
			t.Errorf("%s: learner %v staged %v shown as learner %v", tc.name, tc.v.learner(), tc.v.staged(), tc.v.member("http").IsLearner)
		}
	}
}

package node

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/logstore"
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

type fakeAges map[raft.ServerAddress]time.Duration

func (f fakeAges) ClusterAge(_ context.Context, addr raft.ServerAddress) (time.Duration, error) {
	if d, ok := f[addr]; ok {
		return d, nil
	}
	return 0, errors.New("unreachable")
}

// TestConnectedSince: a voter counts as connected when this leader has
// reached it without a failure for HealthInterval, or reaches it now and
// it says it has been in the cluster that long; never when this leader
// does not reach it now.
func TestConnectedSince(t *testing.T) {
	now := time.Unix(1000, 0)
	repl := newReplication(nil, logstore.NewHealth(quiet), newMetrics(), time.Second, time.Second)
	repl.now = func() time.Time { return now }
	n := &Node{cfg: Config{ID: 1}, repl: repl}
	vs := []memberView{
		{id: 1, server: raft.Server{ID: "1", Address: "a1", Suffrage: raft.Voter}},
		{id: 2, server: raft.Server{ID: "2", Address: "a2", Suffrage: raft.Voter}},
		{id: 3, server: raft.Server{ID: "3", Address: "a3", Suffrage: raft.Voter}},
		{id: 4, server: raft.Server{ID: "4", Address: "a4", Suffrage: raft.Nonvoter}, rec: &pb.Member{IsLearner: true}},
	}
	repl.active["2"] = now.Add(-10 * time.Second)
	repl.active["3"] = now.Add(-time.Second)
	ctx := context.Background()
	if got := n.connectedSince(ctx, vs); got != 2 {
		t.Fatalf("without ages: %d connected, want 2 (this member, and 2 reached for 10 s)", got)
	}
	n.SetPeerAges(fakeAges{"a3": time.Minute})
	if got := n.connectedSince(ctx, vs); got != 3 || !n.connectedFully(ctx, vs) {
		t.Fatalf("3 in the cluster for a minute: %d connected", got)
	}
	n.SetPeerAges(fakeAges{"a3": 2 * time.Second})
	if got := n.connectedSince(ctx, vs); got != 2 {
		t.Fatalf("3 in the cluster for 2 s: %d connected, want 2", got)
	}
	delete(repl.active, "3")
	n.SetPeerAges(fakeAges{"a3": time.Minute})
	if got := n.connectedSince(ctx, vs); got != 2 {
		t.Fatalf("3 not reached now: %d connected, want 2", got)
	}
}

// TestClusterTime: a member's age in the cluster survives a short gap
// without a leader (a transfer) and starts over after a long one.
func TestClusterTime(t *testing.T) {
	var c clusterTime
	t0 := time.Unix(100, 0)
	grace := time.Second
	if c.age(t0, grace) != 0 {
		t.Fatal("age before any leader")
	}
	c.observe(true, t0, grace)
	c.observe(false, t0.Add(10*time.Second), grace)
	if got := c.age(t0.Add(10*time.Second+500*time.Millisecond), grace); got != 10*time.Second+500*time.Millisecond {
		t.Fatalf("age within a short gap: %v", got)
	}
	c.observe(true, t0.Add(10*time.Second+500*time.Millisecond), grace)
	if got := c.age(t0.Add(20*time.Second), grace); got != 20*time.Second {
		t.Fatalf("age after a short gap: %v", got)
	}
	c.observe(false, t0.Add(20*time.Second), grace)
	if got := c.age(t0.Add(25*time.Second), grace); got != 0 {
		t.Fatalf("age during a long gap: %v", got)
	}
	c.observe(true, t0.Add(25*time.Second), grace)
	if got := c.age(t0.Add(26*time.Second), grace); got != time.Second {
		t.Fatalf("age after a long gap: %v", got)
	}
}

// TestRemoval: a configuration without this member means removal only
// after one with it; a joining member's first snapshot may predate its add.
func TestRemoval(t *testing.T) {
	for _, tc := range []struct {
		shutdown, in, known, joined bool
		removed                     bool
	}{
		{in: false, known: true, joined: false, removed: false}, // joining: the snapshot predates the add
		{in: false, known: true, joined: true, removed: true},
		{in: true, known: true, joined: true, removed: false},
		{in: false, known: false, joined: false, removed: false}, // nothing replicated yet
		{shutdown: true, removed: true},
	} {
		if got := removal(tc.shutdown, tc.in, tc.known, tc.joined) != ""; got != tc.removed {
			t.Errorf("%+v: removed %v", tc, got)
		}
	}
}

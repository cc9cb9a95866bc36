package member_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
	"github.com/corenode/corenode/node"
)

// suffrage is member id's suffrage in raft's configuration as member i
// sees it, and whether it is there at all.
func suffrage(t *testing.T, c *membertest.Cluster, i int, id uint64) (raft.ServerSuffrage, bool) {
	t.Helper()
	f := c.Members[i].Node().Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == node.ServerID(id) {
			return s.Suffrage, true
		}
	}
	return 0, false
}

// isLearner is what MemberList says of member id.
func isLearner(t *testing.T, cli *clientv3.Client, id uint64) bool {
	t.Helper()
	ml, err := cli.MemberList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		if m.ID == id {
			return m.IsLearner
		}
	}
	t.Fatalf("member %x not in the member list %v", id, ml.Members)
	return false
}

// TestLearner adds a learner: it is refused promotion while it holds
// nothing, catches up once started, serves serializable and linearizable
// reads and watches without voting, counts against --max-learners, cannot
// lead, and votes once promoted.
func TestLearner(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	leader := c.WaitLeader()
	cli := c.Client(leader)
	if _, err := cli.Put(ctx, "before", "1"); err != nil {
		t.Fatal(err)
	}

	l := c.Add(true)
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id uint64
	for _, m := range ml.Members {
		if m.IsLearner {
			id = m.ID
		}
	}
	if len(ml.Members) != 4 || id == 0 {
		t.Fatalf("member list after adding a learner: %v", ml.Members)
	}
	if _, err := cli.MemberPromote(ctx, id); !errors.Is(rpctypes.Error(err), rpctypes.ErrMemberLearnerNotReady) {
		t.Fatalf("promoting a learner that holds nothing: %v, want %v", err, rpctypes.ErrMemberLearnerNotReady)
	}
	if _, err := cli.MemberAddAsLearner(ctx, []string{"http://127.0.0.1:1"}); !errors.Is(rpctypes.Error(err), rpctypes.ErrTooManyLearners) {
		t.Fatalf("a second learner: %v, want %v", err, rpctypes.ErrTooManyLearners)
	}

	c.Start(l)
	if c.Members[l].ID() != id {
		t.Fatalf("the learner started as %x, the cluster added %x", c.Members[l].ID(), id)
	}
	select {
	case <-c.Members[l].Ready():
	case <-time.After(15 * time.Second):
		t.Fatal("the learner never became ready")
	}
	lcli := c.Client(l)
	if r, err := lcli.Get(ctx, "before", clientv3.WithSerializable()); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("serializable read on the learner: %v, %v", r, err)
	}
	w := lcli.Watch(ctx, "after")
	if _, err := lcli.Put(ctx, "after", "2"); err != nil {
		t.Fatalf("a write through the learner: %v", err)
	}
	if r, err := lcli.Get(ctx, "after"); err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "2" {
		t.Fatalf("linearizable read on the learner: %v, %v", r, err)
	}
	select {
	case ev := <-w:
		if len(ev.Events) != 1 || string(ev.Events[0].Kv.Value) != "2" {
			t.Fatalf("watch on the learner: %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the learner's watch saw nothing")
	}
	if s, err := lcli.Status(ctx, c.Endpoint(l)); err != nil || !s.IsLearner {
		t.Fatalf("status of the learner: %+v, %v", s, err)
	}
	if s, ok := suffrage(t, c, leader, id); !ok || s != raft.Nonvoter {
		t.Fatalf("the learner is %v in raft (present %v), want a non-voter", s, ok)
	}
	if _, err := cli.MoveLeader(ctx, id); !errors.Is(rpctypes.Error(err), rpctypes.ErrBadLeaderTransferee) {
		t.Fatalf("moving leadership to a learner: %v, want %v", err, rpctypes.ErrBadLeaderTransferee)
	}

	if _, err := cli.MemberPromote(ctx, id); err != nil {
		t.Fatalf("promote the learner: %v", err)
	}
	if s, _ := suffrage(t, c, leader, id); s != raft.Voter || isLearner(t, cli, id) {
		t.Fatalf("after promotion the member is %v in raft, learner %v", s, isLearner(t, cli, id))
	}
	if _, err := cli.MemberPromote(ctx, id); !errors.Is(rpctypes.Error(err), rpctypes.ErrMemberNotLearner) {
		t.Fatalf("promoting a voter: %v, want %v", err, rpctypes.ErrMemberNotLearner)
	}
}

// TestAddVoterToOneMember adds a voter to a one-member cluster: the call
// answers, the cluster keeps taking writes while the new member is not
// started (etcd's would have lost its quorum), and the new member becomes
// a voter once it has caught up.
func TestAddVoterToOneMember(t *testing.T) {
	c := membertest.New(t, 1)
	ctx := ctxT(t)
	j := c.Add(false)
	ml, err := c.Client(0).MemberList(ctx)
	if err != nil || len(ml.Members) != 2 || ml.Members[0].IsLearner || ml.Members[1].IsLearner {
		t.Fatalf("member list after the add: %v, %v", ml, err)
	}
	if _, err := c.Client(0).Put(ctx, "k", "v"); err != nil {
		t.Fatalf("a write while the added voter is not started: %v", err)
	}
	c.Start(j)
	id := c.Members[j].ID()
	membertest.Eventually(t, 15*time.Second, func() bool {
		s, ok := suffrage(t, c, 0, id)
		return ok && s == raft.Voter
	}, "the new member never became a voter")
	if r, err := c.Client(j).Get(ctx, "k", clientv3.WithSerializable()); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the new member's state: %v, %v", r, err)
	}
	// Two voters now: a write needs both.
	c.Stop(j)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.Client(0).Put(wctx, "k", "w"); err == nil {
		t.Fatal("a write committed without the second voter")
	}
}

// TestJoinLearnsItsID joins a member to a cluster started with its own
// token, started with another token, as `etcdctl member add` and a start
// with --initial-cluster-state existing do: the member takes the ID the
// cluster gave it. A member nobody added is refused at once with one line
// and leaves the membership as it was.
func TestJoinLearnsItsID(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(i int, cfg *member.Config) { cfg.InitialClusterToken = "team-a" }))
	ctx := ctxT(t)

	stray := c.Prepare()
	err := c.StartErr(stray)
	if err == nil || !strings.Contains(err.Error(), "etcdctl member add") {
		t.Fatalf("a member nobody added started: %v", err)
	}
	if ml, err := c.Client(0).MemberList(ctx); err != nil || len(ml.Members) != 3 {
		t.Fatalf("member list after a refused join: %v, %v", ml, err)
	}

	j := c.Add(false)
	cfg := c.Config(j)
	if cfg.InitialClusterToken != "team-a" {
		t.Fatalf("token %q", cfg.InitialClusterToken)
	}
	c.Start(j)
	if _, err := c.Client(j).Put(ctx, "joined", "1"); err != nil {
		t.Fatalf("a write through the joined member: %v", err)
	}
	membertest.Eventually(t, 15*time.Second, func() bool {
		s, ok := suffrage(t, c, c.WaitLeader(), c.Members[j].ID())
		return ok && s == raft.Voter
	}, "the joined member never became a voter")
	// Restarted, it keeps its ID: the data dir keeps it.
	id := c.Members[j].ID()
	c.Stop(j)
	c.Restart(j)
	if c.Members[j].ID() != id {
		t.Fatalf("restarted as %x, was %x", c.Members[j].ID(), id)
	}
}

// TestMemberUpdate moves a member to another peer URL, as an operator
// does: stop it, update its peer URLs, start it on them. The others reach
// it there. (Updating a live member also works, but hashicorp/raft 1.7.3
// reads the peer it replicates to without its lock, replication.go:660, a
// read the race detector reports when the address changes under an append
// in flight; the ID it reads never changes.)
func TestMemberUpdate(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	leader := c.WaitLeader()
	f := (leader + 1) % 3
	id := c.Members[f].ID()
	moved := c.Prepare() // only for its fresh listeners and URLs
	newURL := c.Config(moved).InitialAdvertisePeerURLs

	if _, err := c.Client(leader).MemberUpdate(ctx, id, c.Config((f+1)%3).InitialAdvertisePeerURLs); !errors.Is(rpctypes.Error(err), rpctypes.ErrPeerURLExist) {
		t.Fatalf("update to another member's URL: %v, want %v", err, rpctypes.ErrPeerURLExist)
	}
	if _, err := c.Client(leader).MemberUpdate(ctx, 12345, newURL); !errors.Is(rpctypes.Error(err), rpctypes.ErrMemberNotFound) {
		t.Fatalf("update of a member that does not exist: %v", err)
	}
	c.Stop(f)
	resp, err := c.Client(leader).MemberUpdate(ctx, id, newURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.Members {
		if m.ID == id && (len(m.PeerURLs) != 1 || m.PeerURLs[0] != newURL[0]) {
			t.Fatalf("member list after the update: %v", m)
		}
	}
	cfg := c.Config(moved)
	cfg.Name, cfg.DataDir = c.Config(f).Name, c.Config(f).DataDir
	c.SetConfig(moved, cfg)
	c.Start(moved)
	if c.Members[moved].ID() != id {
		t.Fatalf("the moved member came back as %x, was %x", c.Members[moved].ID(), id)
	}
	if _, err := c.Client(leader).Put(ctx, "after-move", "1"); err != nil {
		t.Fatal(err)
	}
	c.CatchUp(leader)
	if r, err := c.Client(moved).Get(ctx, "after-move", clientv3.WithSerializable()); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the moved member's state: %v, %v", r, err)
	}
}

// TestStrictReconfigCheck: with the check on, a fresh cluster refuses a
// voter until the leader has reached every member for HealthInterval, and
// a one-member cluster refuses to remove its last member with etcd's words.
func TestStrictReconfigCheck(t *testing.T) {
	strict := membertest.WithConfig(func(i int, cfg *member.Config) { cfg.StrictReconfigCheck = true })
	c := membertest.New(t, 3, strict)
	ctx := ctxT(t)
	if _, err := c.Client().MemberAdd(ctx, []string{"http://127.0.0.1:1"}); !errors.Is(rpctypes.Error(err), rpctypes.ErrUnhealthy) {
		t.Fatalf("an add right after the start: %v, want %v", err, rpctypes.ErrUnhealthy)
	}

	one := membertest.New(t, 1, strict)
	id := one.Members[0].ID()
	if _, err := one.Client().MemberRemove(ctx, id); !errors.Is(rpctypes.Error(err), rpctypes.ErrMemberNotEnoughStarted) {
		t.Fatalf("removing the last member: %v, want %v", err, rpctypes.ErrMemberNotEnoughStarted)
	}
	lax := membertest.New(t, 1)
	if _, err := lax.Client().MemberRemove(ctx, lax.Members[0].ID()); !errors.Is(rpctypes.Error(err), rpctypes.ErrMemberNotEnoughStarted) {
		t.Fatalf("removing the last member without the check: %v, want %v", err, rpctypes.ErrMemberNotEnoughStarted)
	}
}

// TestJoinAfterSnapshot joins a member after the leader truncated its log
// to a snapshot: the new member catches up from the snapshot (raft's
// InstallSnapshot, which the promoter does not see) and still becomes a
// voter.
func TestJoinAfterSnapshot(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(i int, cfg *member.Config) { cfg.SnapshotCount = 20 }))
	ctx := ctxT(t)
	leader := c.WaitLeader()
	for i := range 100 {
		if _, err := c.Client(leader).Put(ctx, fmt.Sprintf("k%03d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Members[leader].Node().Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	j := c.Join()
	id := c.Members[j].ID()
	membertest.Eventually(t, 15*time.Second, func() bool {
		s, ok := suffrage(t, c, c.WaitLeader(), id)
		return ok && s == raft.Voter
	}, "a member that caught up from a snapshot never became a voter")
	r, err := c.Client(j).Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithCountOnly())
	if err != nil || r.Count != 100 {
		t.Fatalf("the joined member holds %v keys (%v)", r, err)
	}
}

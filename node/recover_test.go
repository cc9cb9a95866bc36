package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/logstore"
)

// TestForceNewCluster: a member of a three-member cluster that lost the
// other two for good restarts with ForceNewCluster as a one-member cluster
// holding every write it had, an entry its log held that was never
// committed included; the lost members are gone from the member list and
// so are their alarms; its ID and the cluster ID stay. Restarted without
// the flag it is still that cluster, and with the flag again it loses
// nothing. Then it grows back with a new member, which gets every key.
// Both log stores, each with a snapshot and a log truncated behind it.
func TestForceNewCluster(t *testing.T) {
	for _, kind := range []string{logstore.WAL, logstore.BoltDB} {
		t.Run(kind, func(t *testing.T) {
			testForceNewCluster(t, kind)
		})
	}
}

func testForceNewCluster(t *testing.T, kind string) {
	c := newInmemCluster(t, 3, noCheckpoints, func(cfg *Config) {
		cfg.LogStore = kind
		cfg.SnapshotCount = 4 // the log kept behind a snapshot: 4 entries
	})
	l := waitLeader(t, c.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, n := range c.nodes {
		if _, err := c.nodes[l].Propose(ctx, fsm.OpPublish, &pb.Member{ID: n.ID(), Name: fmt.Sprintf("m%d", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	s := (l + 1) % 3 // the survivor, a follower
	var lost []uint64
	for i, n := range c.nodes {
		if i != s {
			lost = append(lost, n.ID())
		}
	}
	for i := range 10 {
		put(t, c.nodes[l], fmt.Sprintf("k%02d", i))
	}
	if err := c.nodes[s].fsm.WaitApplied(ctx, c.nodes[l].fsm.Applied()); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[s].raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 15; i++ {
		put(t, c.nodes[l], fmt.Sprintf("k%02d", i))
	}
	// A dropped member's NOSPACE would refuse every put after the recovery.
	for _, a := range []*pb.AlarmRequest{
		{Action: pb.AlarmRequest_ACTIVATE, MemberID: lost[0], Alarm: pb.AlarmType_NOSPACE},
		{Action: pb.AlarmRequest_ACTIVATE, MemberID: c.nodes[s].ID(), Alarm: pb.AlarmType_CORRUPT},
	} {
		if _, err := c.nodes[l].Propose(ctx, fsm.OpAlarm, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.nodes[s].fsm.WaitApplied(ctx, c.nodes[l].fsm.Applied()); err != nil {
		t.Fatal(err)
	}
	id, clusterID := c.nodes[s].ID(), c.nodes[s].ClusterID()
	oldIncarnation := c.nodes[s].fsm.Incarnation()
	if oldIncarnation == 0 {
		t.Fatal("the cluster committed no incarnation")
	}
	for _, n := range c.nodes {
		n.Close()
	}
	if first, _ := mustFirstIndex(t, c.cfgs[s]); first <= 1 {
		t.Fatalf("the survivor's log starts at %d: the snapshot truncated nothing, so the test misses the log-after-snapshot case", first)
	}
	// A delete, which NOSPACE lets through, as every member would have
	// applied it.
	appendUncommitted(t, c.cfgs[s], fsm.OpDeleteRange, &pb.DeleteRangeRequest{Key: []byte("k00")})

	c.cfgs[s].ForceNewCluster = true
	c.restart(s)
	n := c.nodes[s]
	waitLeader(t, []*Node{n})
	const keys = 14 // 15 acknowledged puts, one delete never committed
	checkForced(t, n, true, id, clusterID, keys)
	// The history goes on, under its one incarnation: a member added later
	// applies the log in order and never meets another.
	if got := n.fsm.Incarnation(); got != oldIncarnation {
		t.Fatalf("incarnation %x after forcing a new cluster, want the history's %x", got, oldIncarnation)
	}
	if a := n.FSM().Alarms(); len(a) != 1 || a[0].MemberID != id {
		t.Fatalf("alarms after forcing a new cluster: %v, want only the survivor's own", a)
	}
	put(t, n, "after-force")

	c.cfgs[s].ForceNewCluster = false
	c.restart(s)
	n = c.nodes[s]
	waitLeader(t, []*Node{n})
	checkForced(t, n, false, id, clusterID, keys+1)
	if _, inc := n.fence.Local(); inc != oldIncarnation {
		t.Fatalf("the handshake states incarnation %x after a restart, want %x", inc, oldIncarnation)
	}

	// A second start with the flag keeps what the first one made.
	c.cfgs[s].ForceNewCluster = true
	c.restart(s)
	n = c.nodes[s]
	waitLeader(t, []*Node{n})
	checkForced(t, n, true, id, clusterID, keys+1)

	j := c.join(s)
	awaitCaughtUp(t, c.nodes[j])
	if got := c.nodes[j].Store().KeyCount(); got != keys+1 {
		t.Fatalf("the member added after the recovery holds %d keys, want %d", got, keys+1)
	}
	if ms, _ := n.Members(); len(ms) != 2 {
		t.Fatalf("members after adding one: %v", ms)
	}
}

// checkForced checks a restarted survivor: the only member, under its own
// ID and the cluster's, with every key and forced or not as this start was.
func checkForced(t *testing.T, n *Node, forced bool, id, clusterID uint64, keys int) {
	t.Helper()
	awaitCaughtUp(t, n)
	if n.ForcedNewCluster() != forced {
		t.Fatalf("ForcedNewCluster() = %v, want %v", n.ForcedNewCluster(), forced)
	}
	if n.ID() != id || n.ClusterID() != clusterID {
		t.Fatalf("ID %x cluster %x, want %x and %x", n.ID(), n.ClusterID(), id, clusterID)
	}
	if got := n.Store().KeyCount(); got != keys {
		t.Fatalf("%d keys, want %d", got, keys)
	}
	ms, err := n.Members()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].ID != id || ms[0].Name == "" || ms[0].IsLearner {
		t.Fatalf("members %v, want this member (%x) alone, a voter with its name", ms, id)
	}
	if ids, _ := n.VoterIDs(); len(ids) != 1 || ids[0] != id {
		t.Fatalf("voters %x, want %x", ids, id)
	}
}

func mustFirstIndex(t *testing.T, cfg Config) (uint64, uint64) {
	t.Helper()
	s, err := logstore.Open(logstore.Config{DataDir: cfg.DataDir, ID: cfg.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	return first, last
}

// appendUncommitted appends a command to a stopped member's log, as a
// leader's entry that reached this follower and no quorum.
func appendUncommitted(t *testing.T, cfg Config, op fsm.Op, msg fsm.Message) {
	t.Helper()
	s, err := logstore.Open(logstore.Config{DataDir: cfg.DataDir, ID: cfg.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	last, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var prev raft.Log
	if err := s.GetLog(last, &prev); err != nil {
		t.Fatal(err)
	}
	data, err := fsm.Encode(op, msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(&raft.Log{Index: last + 1, Term: prev.Term, Type: raft.LogCommand, Data: data}); err != nil {
		t.Fatal(err)
	}
}

// TestForceNewClusterNeedsState: on a data dir without raft state the flag
// is refused with a sentence that says why, and nothing is bootstrapped.
func TestForceNewClusterNeedsState(t *testing.T) {
	addr, tr := raft.NewInmemTransport("")
	dir := t.TempDir()
	_, err := New(Config{Name: "m", DataDir: dir, ID: 1, Transport: tr, Bootstrap: true, ForceNewCluster: true,
		InitialMembers: []raft.Server{{Suffrage: raft.Voter, ID: ServerID(1), Address: addr}}, RaftLog: discard{}})
	if !errors.Is(err, ErrNoStateToRecover) {
		t.Fatalf("New with ForceNewCluster on an empty data dir: %v, want ErrNoStateToRecover", err)
	}
	if first, last := mustFirstIndex(t, Config{DataDir: dir, ID: 1}); first != 0 || last != 0 {
		t.Fatalf("the refused start left a log %d..%d", first, last)
	}
}

package member_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// TestCorruptionCheckNamesDivergedMember: a follower whose state diverged
// behind raft's back (as a flipped byte under its log would make it) is
// named by the leader's periodic check with a CORRUPT alarm, and from then
// on answers no read, while the others serve on.
func TestCorruptionCheckNamesDivergedMember(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) {
		cfg.CorruptCheckTime = 100 * time.Millisecond
	}))
	ctx := ctxT(t)
	leader := c.WaitLeader()
	f := follower(c, leader)
	cli := c.Client(leader)
	if _, err := cli.Put(ctx, "/i/a", "1"); err != nil {
		t.Fatal(err)
	}
	// The follower's store takes a write no other member has.
	if _, err := c.Members[f].Node().Store().Put(&pb.PutRequest{Key: []byte("/i/b"), Value: []byte("diverged")}); err != nil {
		t.Fatal(err)
	}
	bad := c.Members[f].ID()
	var alarms []*pb.AlarmMember
	writes := 0
	membertest.Eventually(t, 10*time.Second, func() bool {
		// Writes move every member past the diverged revision.
		if _, err := cli.Put(ctx, fmt.Sprintf("/i/w%d", writes%4), "v"); err != nil {
			t.Fatal(err)
		}
		writes++
		resp, err := cli.AlarmList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		alarms = resp.Alarms
		return len(alarms) > 0
	}, "no CORRUPT alarm within 10 s of 100 ms checks")
	if len(alarms) != 1 || alarms[0].MemberID != bad || alarms[0].Alarm != pb.AlarmType_CORRUPT {
		t.Fatalf("alarms %v, want CORRUPT of member %x only", alarms, bad)
	}
	// The leader has applied the alarm; the corrupt member applies it when
	// it catches up to the leader's index, not before.
	c.CatchUp(leader)
	if _, err := c.Client(f).Get(ctx, "/i/a", clientv3.WithSerializable()); !errors.Is(err, rpctypes.ErrCorrupt) {
		t.Fatalf("serializable read on the corrupt member: %v, want %v", err, rpctypes.ErrCorrupt)
	}
	if _, err := c.Client(f).Get(ctx, "/i/a"); !errors.Is(err, rpctypes.ErrCorrupt) {
		t.Fatalf("linearizable read on the corrupt member: %v, want %v", err, rpctypes.ErrCorrupt)
	}
	for i := range c.Members {
		if i == f {
			continue
		}
		if r, err := c.Client(i).Get(ctx, "/i/a"); err != nil || len(r.Kvs) != 1 {
			t.Fatalf("member %d, not corrupt, stopped serving: %v", i, err)
		}
	}
}

// TestCorruptionCheckNamesShortMember: a follower that applied every entry
// the others did, yet holds one revision fewer (the others' stores took a
// write it lacks), answers "future revision" at the revision the leader
// compares. Before, the check left such a member out round after round on
// an idle cluster; now it is judged short, and named.
func TestCorruptionCheckNamesShortMember(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) {
		cfg.CorruptCheckTime = 100 * time.Millisecond
	}))
	ctx := ctxT(t)
	leader := c.WaitLeader()
	f := follower(c, leader)
	if _, err := c.Client(leader).Put(ctx, "/i/a", "1"); err != nil {
		t.Fatal(err)
	}
	for i := range c.Members {
		c.CatchUp(i)
	}
	for i := range c.Members {
		if i == f {
			continue
		}
		if _, err := c.Members[i].Node().Store().Put(&pb.PutRequest{Key: []byte("/i/b"), Value: []byte("only-here")}); err != nil {
			t.Fatal(err)
		}
	}
	bad := c.Members[f].ID()
	var alarms []*pb.AlarmMember
	membertest.Eventually(t, 10*time.Second, func() bool {
		resp, err := c.Client(leader).AlarmList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		alarms = resp.Alarms
		return len(alarms) > 0
	}, "no CORRUPT alarm within 10 s of 100 ms checks for a member short of the compared revision")
	if len(alarms) != 1 || alarms[0].MemberID != bad || alarms[0].Alarm != pb.AlarmType_CORRUPT {
		t.Fatalf("alarms %v, want CORRUPT of member %x only", alarms, bad)
	}
}

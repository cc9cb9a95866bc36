package member_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
	"github.com/corenode/corenode/node"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// follower returns the index of a member that is not the leader.
func follower(c *membertest.Cluster, leader int) int {
	for i, m := range c.Members {
		if i != leader && m != nil {
			return i
		}
	}
	return -1
}

func TestPutThenLinearizableGetOnEveryMember(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	leader := c.WaitLeader()
	// Write through a follower: it must forward to the leader.
	put, err := c.Client(follower(c, leader)).Put(ctx, "/svc/a", "10.0.0.1")
	if err != nil {
		t.Fatalf("put via follower: %v", err)
	}
	if put.Header.Revision < 2 || put.Header.ClusterId == 0 || put.Header.MemberId == 0 || put.Header.RaftTerm == 0 {
		t.Fatalf("incomplete header %+v", put.Header)
	}
	for i := range c.Members {
		resp, err := c.Client(i).Get(ctx, "/svc/a")
		if err != nil {
			t.Fatalf("get on member %d: %v", i, err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "10.0.0.1" {
			t.Fatalf("member %d: linearizable get returned %v, want the acknowledged write", i, resp.Kvs)
		}
		if resp.Header.Revision < put.Header.Revision {
			t.Fatalf("member %d: read revision %d is older than acknowledged write %d", i, resp.Header.Revision, put.Header.Revision)
		}
	}
}

func TestRangeOptions(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	cli := c.Client()
	for _, k := range []string{"a", "b/1", "b/2", "b/3", "c"} {
		if _, err := cli.Put(ctx, k, "v-"+k); err != nil {
			t.Fatal(err)
		}
	}
	rev1, _ := cli.Get(ctx, "b/1")
	if _, err := cli.Put(ctx, "b/1", "changed"); err != nil {
		t.Fatal(err)
	}
	keys := func(r *clientv3.GetResponse) string {
		var ks []string
		for _, kv := range r.Kvs {
			ks = append(ks, string(kv.Key))
		}
		return strings.Join(ks, ",")
	}
	cases := []struct {
		name string
		key  string
		opts []clientv3.OpOption
		want string
		more bool
		cnt  int64
	}{
		{"prefix", "b/", []clientv3.OpOption{clientv3.WithPrefix()}, "b/1,b/2,b/3", false, 3},
		{"range", "a", []clientv3.OpOption{clientv3.WithRange("b/3")}, "a,b/1,b/2", false, 3},
		{"from key", "b/2", []clientv3.OpOption{clientv3.WithFromKey()}, "b/2,b/3,c", false, 3},
		{"limit", "", []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithLimit(2)}, "a,b/1", true, 5},
		{"sort desc by key", "b/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)}, "b/3,b/2,b/1", false, 3},
		{"sort by mod rev desc", "", []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1)}, "b/1", true, 5},
		{"min mod rev", "", []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithMinModRev(rev1.Header.Revision + 1)}, "b/1", false, 5},
		{"max create rev", "b/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithMaxCreateRev(rev1.Kvs[0].CreateRevision)}, "b/1", false, 3},
		{"past revision", "b/1", []clientv3.OpOption{clientv3.WithRev(rev1.Header.Revision)}, "b/1", false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			if key == "" {
				key = "\x00"
			}
			r, err := cli.Get(ctx, key, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := keys(r); got != tc.want || r.More != tc.more || r.Count != tc.cnt {
				t.Fatalf("got keys %q more=%v count=%d, want %q more=%v count=%d", got, r.More, r.Count, tc.want, tc.more, tc.cnt)
			}
		})
	}
	r, err := cli.Get(ctx, "b/1", clientv3.WithRev(rev1.Header.Revision))
	if err != nil || string(r.Kvs[0].Value) != "v-b/1" {
		t.Fatalf("get at past revision: %v %v", r, err)
	}
	r, err = cli.Get(ctx, "b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || r.Count != 3 || len(r.Kvs) != 0 {
		t.Fatalf("count only: %+v %v", r, err)
	}
	r, err = cli.Get(ctx, "b/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(r.Kvs) != 3 || len(r.Kvs[0].Value) != 0 {
		t.Fatalf("keys only: %+v %v", r, err)
	}
	r, err = cli.Get(ctx, "b/1", clientv3.WithSerializable())
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("serializable: %+v %v", r, err)
	}
	if _, err := cli.Get(ctx, "a", clientv3.WithRev(r.Header.Revision+100)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("future revision: got %v, want %v", err, rpctypes.ErrFutureRev)
	}
}

func TestTxnCompareAndSwap(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	cli := c.Client()
	if _, err := cli.Put(ctx, "lock", "free"); err != nil {
		t.Fatal(err)
	}
	cas := func(from, to string) bool {
		t.Helper()
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("lock"), "=", from)).
			Then(clientv3.OpPut("lock", to)).Else(clientv3.OpGet("lock")).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return r.Succeeded
	}
	if !cas("free", "taken") {
		t.Fatal("first CAS should win")
	}
	if cas("free", "taken-again") {
		t.Fatal("second CAS from a stale value must fail")
	}
	r, err := cli.Get(ctx, "lock")
	if err != nil || string(r.Kvs[0].Value) != "taken" {
		t.Fatalf("after CAS: %v %v", r, err)
	}
	// All writes of one txn share one revision.
	before := r.Header.Revision
	tr, err := cli.Txn(ctx).Then(clientv3.OpPut("x", "1"), clientv3.OpPut("y", "2"), clientv3.OpDelete("lock")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if tr.Header.Revision != before+1 {
		t.Fatalf("txn revision %d, want %d", tr.Header.Revision, before+1)
	}
	// A txn that fails validation at apply changes nothing.
	_, err = cli.Txn(ctx).Then(clientv3.OpPut("z", "1"), clientv3.OpPut("w", "1", clientv3.WithLease(12345))).Commit()
	if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("txn attaching to a missing lease: got %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}
	if g, _ := cli.Get(ctx, "z"); len(g.Kvs) != 0 {
		t.Fatal("a refused txn must not apply in part")
	}
}

func TestBadInputGetsEtcdErrors(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	kvc := pb.NewKVClient(c.Client().ActiveConnection())
	big := make([]byte, 2<<20)
	ops := make([]*pb.RequestOp, 129)
	for i := range ops {
		ops[i] = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(fmt.Sprint(i))}}}
	}
	put := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
	}
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"empty key put", func() error { _, err := kvc.Put(ctx, &pb.PutRequest{}); return err }, rpctypes.ErrGRPCEmptyKey},
		{"empty key range", func() error { _, err := kvc.Range(ctx, &pb.RangeRequest{}); return err }, rpctypes.ErrGRPCEmptyKey},
		{"too large", func() error {
			_, err := kvc.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: big[:1600*1024]})
			return err
		}, rpctypes.ErrGRPCRequestTooLarge},
		{"too many ops", func() error { _, err := kvc.Txn(ctx, &pb.TxnRequest{Success: ops}); return err }, rpctypes.ErrGRPCTooManyOps},
		{"duplicate key", func() error {
			_, err := kvc.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("d"), put("d")}})
			return err
		}, rpctypes.ErrGRPCDuplicateKey},
		{"value with ignore_value", func() error {
			_, err := kvc.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), IgnoreValue: true})
			return err
		}, rpctypes.ErrGRPCValueProvided},
		{"ignore_value on missing key", func() error {
			_, err := kvc.Put(ctx, &pb.PutRequest{Key: []byte("missing"), IgnoreValue: true})
			return err
		}, rpctypes.ErrGRPCKeyNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err == nil || err.Error() != tc.want.Error() {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if r, err := kvc.Range(ctx, &pb.RangeRequest{Key: []byte("\x00"), RangeEnd: []byte("\x00")}); err != nil || r.Count != 0 {
		t.Fatalf("bad requests must change nothing, found %+v (%v)", r, err)
	}
}

func TestWatchFromHistoryThenLive(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	leader := c.WaitLeader()
	cli := c.Client(leader)
	first, err := cli.Put(ctx, "/w/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	cli.Put(ctx, "/w/b", "2")
	cli.Delete(ctx, "/w/a")
	// Watch on a follower, from the first write's revision.
	wcli := c.Client(follower(c, leader))
	wch := wcli.Watch(ctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision), clientv3.WithPrevKV())
	cli.Put(ctx, "/w/c", "3")
	cli.Put(ctx, "/other", "x")
	cli.Put(ctx, "/w/b", "4")
	want := []string{"PUT /w/a 1", "PUT /w/b 2", "DELETE /w/a", "PUT /w/c 3", "PUT /w/b 4 prev=2"}
	var got []string
	var lastRev int64
	for len(got) < len(want) {
		select {
		case resp, ok := <-wch:
			if !ok {
				t.Fatalf("watch closed early; got %v", got)
			}
			if err := resp.Err(); err != nil {
				t.Fatal(err)
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision <= lastRev {
					t.Fatalf("event at revision %d after %d: out of order or repeated", ev.Kv.ModRevision, lastRev)
				}
				lastRev = ev.Kv.ModRevision
				s := ev.Type.String() + " " + string(ev.Kv.Key)
				if ev.Type == mvccpb.PUT {
					s += " " + string(ev.Kv.Value)
					if ev.PrevKv != nil && string(ev.Kv.Key) == "/w/b" && ev.Kv.Version > 1 {
						s += " prev=" + string(ev.PrevKv.Value)
					}
				}
				got = append(got, s)
			}
		case <-ctx.Done():
			t.Fatalf("timed out; got %v, want %v", got, want)
		}
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
}

func TestCompaction(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	cli := c.Client()
	var revs []int64
	for i := range 5 {
		r, err := cli.Put(ctx, "k", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.Header.Revision)
	}
	if _, err := cli.Compact(ctx, revs[3]); err != nil {
		t.Fatal(err)
	}
	// Watches are served by the member the client talks to; the leader has
	// applied the compaction once it is acknowledged, a follower may not yet.
	lcli := c.Client(c.WaitLeader())
	if _, err := cli.Get(ctx, "k", clientv3.WithRev(revs[1])); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("get below compaction: got %v, want ErrCompacted", err)
	}
	r, err := cli.Get(ctx, "k", clientv3.WithRev(revs[3]))
	if err != nil || string(r.Kvs[0].Value) != "3" {
		t.Fatalf("get at compaction revision: %v %v", r, err)
	}
	wch := lcli.Watch(ctx, "k", clientv3.WithRev(revs[1]))
	select {
	case resp := <-wch:
		if resp.CompactRevision != revs[3] || !errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			t.Fatalf("watch from compacted revision: %+v err=%v", resp, resp.Err())
		}
	case <-ctx.Done():
		t.Fatal("no compacted response")
	}
	if _, err := cli.Compact(ctx, revs[2]); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("compacting below the compaction revision: got %v", err)
	}
}

func TestMemberListStatusAndMoveLeader(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	cli := c.Client()
	deadline := time.Now().Add(10 * time.Second)
	var ml *clientv3.MemberListResponse
	for {
		var err error
		ml, err = cli.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		published := 0
		for _, m := range ml.Members {
			if m.Name != "" && len(m.ClientURLs) == 1 {
				published++
			}
		}
		if published == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members did not publish names and client URLs: %v", ml.Members)
		}
		time.Sleep(50 * time.Millisecond)
	}
	leader := c.WaitLeader()
	// MemberList is answered by the leader; member 0's own status may
	// trail it until member 0 hears of the commits (a CI flake).
	c.CatchUp(leader)
	st, err := cli.Status(ctx, c.Endpoint(0))
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != c.Members[leader].ID() || st.RaftIndex == 0 || st.Header.ClusterId != ml.Header.ClusterId {
		t.Fatalf("status %+v, leader should be %x", st, c.Members[leader].ID())
	}
	target := follower(c, leader)
	// MoveLeader sent to a follower is forwarded to the leader.
	if _, err := c.Client(target).MoveLeader(ctx, c.Members[target].ID()); err != nil {
		t.Fatalf("move leader: %v", err)
	}
	if got := c.WaitLeader(); got != target {
		t.Fatalf("leader is member %d after move, want %d", got, target)
	}
}

func TestFailoverAndCatchUp(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	leader := c.WaitLeader()
	other := follower(c, leader)
	cli := c.Client(other)
	if _, err := cli.Put(ctx, "before", "1"); err != nil {
		t.Fatal(err)
	}
	c.Stop(leader)
	start := time.Now()
	var err error
	for time.Since(start) < 10*time.Second {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = cli.Put(wctx, "after", "2")
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("no write accepted after the leader stopped: %v", err)
	}
	t.Logf("first write after leader stop acknowledged in %v", time.Since(start))
	c.Restart(leader)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := c.Client(leader).Get(ctx, "after", clientv3.WithSerializable())
		if err == nil && len(r.Kvs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted member did not catch up: %v %v", r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWatchAcrossLeaderChanges(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	cli := c.Client()
	wch := c.Client(0).Watch(ctx, "/seq/", clientv3.WithPrefix())
	const n = 60
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if i%20 == 10 {
				leader := c.WaitLeader()
				to := (leader + 1) % 3
				if _, err := c.Client(leader).MoveLeader(ctx, c.Members[to].ID()); err != nil {
					done <- fmt.Errorf("move leader: %w", err)
					return
				}
			}
			if _, err := cli.Put(ctx, fmt.Sprintf("/seq/%03d", i), "v"); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var seen []string
	var last int64
	for len(seen) < n {
		select {
		case resp := <-wch:
			if err := resp.Err(); err != nil {
				t.Fatal(err)
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision <= last {
					t.Fatalf("revision %d after %d", ev.Kv.ModRevision, last)
				}
				last = ev.Kv.ModRevision
				seen = append(seen, string(ev.Kv.Key))
			}
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			done = nil
		case <-ctx.Done():
			t.Fatalf("saw %d of %d events", len(seen), n)
		}
	}
	for i, k := range seen {
		if want := fmt.Sprintf("/seq/%03d", i); k != want {
			t.Fatalf("event %d is %s, want %s", i, k, want)
		}
	}
}

func TestSnapshotTruncatesLogAndRestarts(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	cli := c.Client()
	const n = 300
	for i := range n {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%04d", i), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Force a snapshot on every member, then restart one from it.
	for _, m := range c.Members {
		if err := m.Node().Raft().Snapshot().Error(); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
	}
	leader := c.WaitLeader()
	f := follower(c, leader)
	c.Stop(f)
	if _, err := cli.Put(ctx, "k-while-down", "x"); err != nil {
		t.Fatal(err)
	}
	c.Restart(f)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := c.Client(f).Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithCountOnly())
		if err == nil && r.Count == n+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted member did not catch up to %d keys: %+v (%v)", n+1, r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMemberAddThenRemove(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	if _, err := c.Client().Put(ctx, "before-join", "1"); err != nil {
		t.Fatal(err)
	}
	n := c.Join()
	// The new member receives the existing state and serves reads.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := c.Client(n).Get(ctx, "before-join", clientv3.WithSerializable())
		if err == nil && len(r.Kvs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("joined member never caught up: %v %v", r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ml, err := c.Client().MemberList(ctx)
	if err != nil || len(ml.Members) != 4 {
		t.Fatalf("member list after add: %v %v", ml, err)
	}
	if _, err := c.Client(0).MemberRemove(ctx, c.Members[n].ID()); err != nil {
		t.Fatalf("member remove: %v", err)
	}
	ml, err = c.Client(0).MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("member list after remove: %v %v", ml, err)
	}
	if _, err := c.Client(0).Put(ctx, "after-remove", "1"); err != nil {
		t.Fatalf("the remaining 3 members must still take writes: %v", err)
	}
	// The removed member learns it was removed, so its process can exit.
	select {
	case <-c.Members[n].Removed():
	case <-time.After(10 * time.Second):
		t.Fatal("removed member never learned it was removed")
	}
	for i := range 3 {
		select {
		case <-c.Members[i].Removed():
			t.Fatalf("member %d thinks it was removed", i)
		default:
		}
	}
	// The removed member no longer takes part: it cannot serve a
	// linearizable read once it has left.
	deadline = time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Client(n).Get(cctx, "after-remove")
		cancel()
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("removed member still serves linearizable reads")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRemoveLeader removes the leader itself: it commits its own removal,
// steps down and stops, and the two remaining members elect a new leader.
func TestRemoveLeader(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	leader := c.WaitLeader()
	rest := []int{(leader + 1) % 3, (leader + 2) % 3}
	if _, err := c.Client(rest...).MemberRemove(ctx, c.Members[leader].ID()); err != nil {
		t.Fatalf("remove the leader: %v", err)
	}
	select {
	case <-c.Members[leader].Removed():
	case <-time.After(10 * time.Second):
		t.Fatal("removed leader never learned it was removed")
	}
	if _, err := c.Client(rest...).Put(ctx, "after", "1"); err != nil {
		t.Fatalf("the remaining members must take writes: %v", err)
	}
	ml, err := c.Client(rest...).MemberList(ctx)
	if err != nil || len(ml.Members) != 2 {
		t.Fatalf("member list after removing the leader: %v %v", ml, err)
	}
}

// TestFollowerReadsAreLinearizable: a linearizable read served by a
// follower (through a read index from the leader) sees every write
// acknowledged before it, including right after leadership moves, when the
// newest entries are raft's own no-op and barrier, which no FSM sees.
func TestFollowerReadsAreLinearizable(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	writer := c.Client(0)
	readers := []*clientv3.Client{c.Client(1), c.Client(2)}
	for i := range 200 {
		if i%50 == 0 {
			// A new term starts with entries that reach no FSM.
			leader := c.WaitLeader()
			next := c.Members[(leader+1)%3].ID()
			if _, err := c.Client(leader).MoveLeader(ctx, next); err != nil {
				t.Fatalf("move leader: %v", err)
			}
			for _, r := range readers {
				rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := r.Get(rctx, "reg")
				cancel()
				if err != nil {
					t.Fatalf("linearizable read right after a leader change: %v", err)
				}
			}
		}
		want := fmt.Sprint(i)
		if _, err := writer.Put(ctx, "reg", want); err != nil {
			t.Fatal(err)
		}
		for j, r := range readers {
			resp, err := r.Get(ctx, "reg")
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != want {
				t.Fatalf("read %d through reader %d after write %q acknowledged: %v", i, j, want, resp.Kvs)
			}
		}
	}
}

// staleProber answers as members that have moved on to a later term while
// raft's own heartbeats to them still succeed, as after a leader resumes
// from a pause and reads answers its followers sent before it.
type staleProber struct{ term uint64 }

func (p staleProber) Term(context.Context, raft.ServerAddress) (uint64, error) { return p.term, nil }

// silentProber gets no answer from anyone.
type silentProber struct{}

func (silentProber) Term(ctx context.Context, _ raft.ServerAddress) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestReadBarrierNeedsFreshTermAnswers checks that a leader confirms its
// leadership only from answers given after the check began, never from
// raft's replication bookkeeping: jepsen-lite saw a leader resumed from
// SIGSTOP serve a stale read because raft's VerifyLeader counted follower
// answers sent before the pause.
func TestReadBarrierNeedsFreshTermAnswers(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	leader := c.WaitLeader()
	n := c.Members[leader].Node()
	if err := n.ReadBarrier(ctx); err != nil {
		t.Fatalf("read barrier on a healthy leader: %v", err)
	}
	cases := []struct {
		name   string
		prober node.TermProber
	}{
		{"followers in a later term", staleProber{n.Term() + 1}},
		{"no answers", silentProber{}},
	}
	real := n.SetTermProber(nil)
	for _, tc := range cases {
		n.SetTermProber(tc.prober)
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := n.ReadBarrier(rctx)
		cancel()
		if err == nil {
			t.Fatalf("%s: read barrier confirmed leadership", tc.name)
		}
		// The server retries until the client's deadline; the read must
		// not be answered from this member's unconfirmed state.
		rctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		_, err = c.Client(leader).Get(rctx, "k")
		cancel()
		if err == nil {
			t.Fatalf("%s: linearizable read served without confirmation", tc.name)
		}
	}
	n.SetTermProber(real)
	if err := n.ReadBarrier(ctx); err != nil {
		t.Fatalf("read barrier after the real prober is back: %v", err)
	}
}

// TestFollowersHearOfCommitsWithoutNewEntries: with raft's own empty
// appends an hour apart, a follower learns that a write committed only from
// the leader's commit notifier; without it, the last write of a burst would
// stay unapplied on followers (invisible to their watchers and serializable
// reads) until the next write.
func TestFollowersHearOfCommitsWithoutNewEntries(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(i int, cfg *member.Config) {
		cfg.CommitNotifyInterval = time.Hour
	}))
	ctx := ctxT(t)
	leader := c.WaitLeader()
	for round := range 3 {
		value := fmt.Sprintf("v%d", round)
		put, err := c.Client(leader).Put(ctx, "/last", value)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.Members {
			if i == leader {
				continue
			}
			for {
				resp, err := c.Client(i).Get(ctx, "/last", clientv3.WithSerializable())
				if err != nil {
					t.Fatalf("member %d: %v (never applied revision %d)", i, err, put.Header.Revision)
				}
				if len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == value {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
}

// TestAFollowersWritesAreReadThereAtOnce: a write answered by a follower
// has applied there, as etcd answers a write only once the member serving
// it has applied it, so a serializable read on the same member sees it. A
// client that puts and then reads without a quorum round (etcdctl get
// --consistency=s, or a member's own quota and alarm checks) relies on it.
func TestAFollowersWritesAreReadThereAtOnce(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	cli := c.Client(follower(c, c.WaitLeader()))
	for i := range 300 {
		want := fmt.Sprint(i)
		put, err := cli.Put(ctx, "reg", want)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Get(ctx, "reg", clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != want {
			t.Fatalf("serializable read %d on the member that answered put %q (revision %d): %v at revision %d", i, want, put.Header.Revision, resp.Kvs, resp.Header.Revision)
		}
	}
}

// TestDowngradeAndStatusVersions: Downgrade answers etcd's errors for a
// cluster that cannot go down to any version, and Status names the
// storage version and the quota.
func TestDowngradeAndStatusVersions(t *testing.T) {
	c := membertest.New(t, 1, membertest.WithConfig(func(i int, cfg *member.Config) { cfg.QuotaBackendBytes = 1 << 30 }))
	ctx := ctxT(t)
	cli := c.Client()
	for _, tc := range []struct {
		action  clientv3.DowngradeAction
		version string
		want    error
	}{
		{clientv3.DowngradeValidate, "3.5", rpctypes.ErrInvalidDowngradeTargetVersion},
		{clientv3.DowngradeEnable, "3.5.0", rpctypes.ErrInvalidDowngradeTargetVersion},
		{clientv3.DowngradeValidate, "three", rpctypes.ErrWrongDowngradeVersionFormat},
	} {
		if _, err := cli.Downgrade(ctx, tc.action, tc.version); !errors.Is(rpctypes.Error(err), tc.want) {
			t.Errorf("downgrade %v %q: %v, want %v", tc.action, tc.version, err, tc.want)
		}
	}
	if d, err := cli.Downgrade(ctx, clientv3.DowngradeCancel, ""); err != nil || d.Version != "3.6" {
		t.Errorf("downgrade cancel with none in flight: %v, %v; etcd 3.6 answers ok and its version", d, err)
	}
	s, err := cli.Status(ctx, c.Endpoint(0))
	if err != nil || s.StorageVersion != "3.6.0" || s.DbSizeQuota != 1<<30 {
		t.Fatalf("status: %+v, %v", s, err)
	}
}

// TestRemoveLeaderThroughItself: a client of the leader alone removes the
// leader. The leader must answer before it stops, which the binary does as
// soon as it learns it was removed (within its 2 s graceful stop), so the
// answer cannot wait for a leader it will never know again; etcdctl
// member remove of the leader's own endpoint (scripts/local-cluster remove)
// saw "transport is closing" when it did.
func TestRemoveLeaderThroughItself(t *testing.T) {
	c := membertest.New(t, 3)
	leader := c.WaitLeader()
	id := c.Members[leader].ID()
	ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
	defer cancel()
	resp, err := c.Client(leader).MemberRemove(ctx, id)
	if err != nil {
		t.Fatalf("the leader removing itself did not answer before it would stop: %v", err)
	}
	for _, m := range resp.Members {
		if m.ID == id {
			t.Fatalf("the answer still lists the removed leader: %v", resp.Members)
		}
	}
}

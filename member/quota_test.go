package member_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// TestQuotaRaisesNoSpace: writes past --quota-backend-bytes are refused
// with etcd's error and raise a NOSPACE alarm that every member enforces;
// reads, deletes and compaction still work, and once room is made,
// `etcdctl alarm disarm` (AlarmDisarm) lets writes in again.
func TestQuotaRaisesNoSpace(t *testing.T) {
	const quota = 64 << 10
	c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.QuotaBackendBytes = quota }))
	ctx := ctxT(t)
	leader := c.WaitLeader()
	f := follower(c, leader)
	cli := c.Client(f)
	value := strings.Repeat("x", 1024)
	var refused error
	var written int
	for i := 0; i < 200 && refused == nil; i++ {
		if _, refused = cli.Put(ctx, fmt.Sprintf("/q/%d", i%8), value); refused == nil {
			written++
		}
	}
	if !errors.Is(refused, rpctypes.ErrNoSpace) {
		t.Fatalf("after %d puts of 1 KiB under a 64 KiB quota: %v, want %v", written, refused, rpctypes.ErrNoSpace)
	}
	if written < 40 {
		t.Fatalf("only %d puts of 1 KiB fit in a 64 KiB quota", written)
	}

	// The alarm is raised by the member that refused, and seen by all.
	c.CatchUp(f)
	alarms, err := c.Client(leader).AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(alarms.Alarms) != 1 || alarms.Alarms[0].Alarm != pb.AlarmType_NOSPACE || alarms.Alarms[0].MemberID != c.Members[f].ID() {
		t.Fatalf("alarm list %v, want NOSPACE of member %x", alarms.Alarms, c.Members[f].ID())
	}
	for i := range c.Members {
		mc := c.Client(i)
		if _, err := mc.Put(ctx, "/q/small", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Errorf("member %d: put under NOSPACE: %v", i, err)
		}
		if _, err := mc.Grant(ctx, 10); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Errorf("member %d: lease grant under NOSPACE: %v", i, err)
		}
		if _, err := mc.Get(ctx, "/q/0"); err != nil {
			t.Errorf("member %d: get under NOSPACE: %v", i, err)
		}
		st, err := mc.Status(ctx, c.Endpoint(i))
		if err != nil {
			t.Fatalf("member %d: status: %v", i, err)
		}
		if !strings.Contains(strings.Join(st.Errors, " "), "NOSPACE") {
			t.Errorf("member %d: status errors %v, want the alarm", i, st.Errors)
		}
	}
	health := func(query string) (int, string) {
		resp, err := http.Get(c.ClientURL(leader) + "/health" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var h struct{ Health, Reason string }
		json.Unmarshal(b, &h)
		return resp.StatusCode, h.Health + " " + h.Reason
	}
	if code, h := health(""); code != http.StatusServiceUnavailable || h != "false ALARM NOSPACE" {
		t.Fatalf("/health under NOSPACE: %d %q", code, h)
	}
	if code, h := health("?exclude=NOSPACE"); code != http.StatusOK {
		t.Fatalf("/health?exclude=NOSPACE: %d %q", code, h)
	}

	// Make room: delete and compact away the history, then disarm.
	del, err := cli.Delete(ctx, "/q/", clientv3.WithPrefix())
	if err != nil || del.Deleted == 0 {
		t.Fatalf("delete under NOSPACE: %v %v", del, err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact under NOSPACE: %v", err)
	}
	if _, err := cli.Put(ctx, "/q/after", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("put before disarm: %v, want NOSPACE still", err)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: alarms.Alarms[0].MemberID, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/q/after", "v"); err != nil {
		t.Fatalf("put after compaction and disarm: %v", err)
	}
	if code, h := health(""); code != http.StatusOK {
		t.Fatalf("/health after disarm: %d %q", code, h)
	}
}

// TestRangeLargerThan64MiB: an answer past gRPC's usual limits is sent, as
// etcd sends it.
func TestRangeLargerThan64MiB(t *testing.T) {
	c := membertest.New(t, 1)
	ctx := ctxT(t)
	cli := c.Client(0)
	value := strings.Repeat("v", 1<<20)
	const n = 70
	for i := range n {
		if _, err := cli.Put(ctx, fmt.Sprintf("/big/%03d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, "/big/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("range of %d MiB: %v", n, err)
	}
	if len(resp.Kvs) != n || len(resp.Kvs[n-1].Value) != 1<<20 {
		t.Fatalf("range answered %d keys", len(resp.Kvs))
	}
}

package discovery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"

	"github.com/corenode/corenode/client/discovery"
	"github.com/corenode/corenode/member/membertest"
)

// ttl is the registrations' TTL in these tests. corenode's floor for the
// test clusters is one and a half of their election timeouts, rounded up
// to a second (1 s); a 1 s lease is too tight for clientv3's keep-alives,
// which are sent every TTL/3 but only on its 500 ms ticks, so the tests
// ask for 2 s.
const ttl = 2 * time.Second

// eventually waits until cond returns nil, checking every 20 ms, and fails
// the test with cond's last error after within. It is for conditions of a
// real cluster or gRPC client that nothing signals.
func eventually(t *testing.T, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stored reads the endpoint stored under key, and its lease.
func stored(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) (ep endpoints.Endpoint, lease clientv3.LeaseID, ok bool) {
	t.Helper()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return endpoints.Endpoint{}, 0, false
	}
	ep, err = discovery.Decode(resp.Kvs[0].Value)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return ep, clientv3.LeaseID(resp.Kvs[0].Lease), true
}

func TestRegistration(t *testing.T) {
	c := membertest.New(t, 3)
	cli := c.Client()
	ctx := testContext(t)

	t.Run("Deregister removes the endpoint at once", func(t *testing.T) {
		reg, err := discovery.Register(ctx, cli, "dereg", "127.0.0.1:1001", ttl)
		if err != nil {
			t.Fatal(err)
		}
		ep, lease, ok := stored(ctx, t, cli, "dereg/127.0.0.1:1001")
		if !ok || ep.Addr != "127.0.0.1:1001" || lease != reg.Lease() || lease == 0 {
			t.Fatalf("stored %+v under lease %x (present %v), want the address under lease %x", ep, lease, ok, reg.Lease())
		}
		if reg.TTL() != ttl {
			t.Fatalf("granted TTL %v, want %v", reg.TTL(), ttl)
		}
		if err := reg.Deregister(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := stored(ctx, t, cli, reg.Key()); ok {
			t.Fatal("endpoint still stored after Deregister returned")
		}
		ttlResp, err := cli.TimeToLive(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		if ttlResp.TTL != -1 {
			t.Fatalf("lease %x has TTL %d after Deregister, want -1 (revoked)", lease, ttlResp.TTL)
		}
		select {
		case <-reg.Done():
		default:
			t.Fatal("Done not closed after Deregister returned")
		}
		if err := reg.Deregister(ctx); err != nil {
			t.Fatalf("second Deregister: %v", err)
		}
	})

	t.Run("the end of ctx removes the endpoint", func(t *testing.T) {
		rctx, cancel := context.WithCancel(ctx)
		reg, err := discovery.Register(rctx, cli, "ctxend", "127.0.0.1:1002", ttl)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		select {
		case <-reg.Done():
		case <-ctx.Done():
			t.Fatal("registration did not end with its context")
		}
		if _, _, ok := stored(ctx, t, cli, reg.Key()); ok {
			t.Fatal("endpoint still stored after the registration's context ended")
		}
	})

	t.Run("a lost lease is replaced and the holder told", func(t *testing.T) {
		events := make(chan discovery.Event, 8)
		reg, err := discovery.Register(ctx, cli, "lost", "127.0.0.1:1003", ttl,
			discovery.WithNotify(func(e discovery.Event) { events <- e }))
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Deregister(ctx)
		first := reg.Lease()
		// Another client revokes the lease: to the holder this looks as a
		// lease that expired during a partition does.
		if _, err := c.Client().Revoke(ctx, first); err != nil {
			t.Fatal(err)
		}
		lost := next(ctx, t, events)
		if lost.Kind != discovery.Lost || lost.Lease != first || lost.Err == nil {
			t.Fatalf("first event %+v, want Lost of lease %x with a reason", lost, first)
		}
		back := next(ctx, t, events)
		if back.Kind != discovery.Reregistered || back.Lease == first || back.Lease == 0 {
			t.Fatalf("second event %+v, want Reregistered under a new lease", back)
		}
		ep, lease, ok := stored(ctx, t, cli, reg.Key())
		if !ok || ep.Addr != "127.0.0.1:1003" || lease != back.Lease || reg.Lease() != back.Lease {
			t.Fatalf("stored %+v under lease %x (present %v), want it under %x", ep, lease, ok, back.Lease)
		}
	})

	t.Run("a holder that stops renewing disappears after its TTL", func(t *testing.T) {
		holder := c.Client()
		reg, err := discovery.Register(ctx, holder, "stopped", "127.0.0.1:1004", ttl)
		if err != nil {
			t.Fatal(err)
		}
		lease := reg.Lease()
		w := watchAfterNow(ctx, t, cli, reg.Key())
		// The holder's process dies: no revoke, no more keep-alives.
		holder.Close()
		<-reg.Done()
		if err := reg.Deregister(ctx); err == nil {
			t.Fatal("Deregister after the client closed says the lease was revoked")
		}
		if _, l, ok := stored(ctx, t, cli, reg.Key()); !ok || l != lease {
			t.Fatal("endpoint gone at once: it should stay until its lease expires")
		}
		stoppedAt := time.Now()
		select {
		case wr := <-w:
			if len(wr.Events) != 1 || wr.Events[0].Type != clientv3.EventTypeDelete {
				t.Fatalf("watch saw %+v, want the endpoint's deletion", wr.Events)
			}
			t.Logf("endpoint deleted %v after its holder stopped (TTL %v)", time.Since(stoppedAt), ttl)
		case <-time.After(ttl + 10*time.Second):
			t.Fatalf("endpoint still stored %v after its holder stopped", ttl+10*time.Second)
		}
		if r, err := cli.TimeToLive(ctx, lease); err != nil || r.TTL != -1 {
			t.Fatalf("lease after the deletion: %+v, %v; want expired", r, err)
		}
	})
}

// watchAfterNow watches key for changes after every write acknowledged so
// far. A watch without a revision starts after what its member has
// applied, which a lagging member would follow with writes already
// acknowledged.
func watchAfterNow(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) clientv3.WatchChan {
	t.Helper()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1))
}

func next(ctx context.Context, t *testing.T, events <-chan discovery.Event) discovery.Event {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-ctx.Done():
		t.Fatal("no registration event")
		return discovery.Event{}
	}
}

func TestRegistrationSurvivesLeaderChange(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := testContext(t)
	events := make(chan discovery.Event, 8)
	reg, err := discovery.Register(ctx, c.Client(), "leaderchange", "127.0.0.1:1005", ttl,
		discovery.WithNotify(func(e discovery.Event) { events <- e }))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Deregister(ctx)
	lease := reg.Lease()
	w := watchAfterNow(ctx, t, c.Client(), reg.Key())
	c.Stop(c.WaitLeader())
	c.WaitLeader()
	// Nothing signals "the lease would have expired by now": wait past
	// the deadline it had when the leader stopped, failing at once if the
	// endpoint goes or the holder hears of a loss.
	select {
	case wr := <-w:
		for _, ev := range wr.Events {
			t.Logf("event %v %s lease %x rev %d", ev.Type, ev.Kv.Key, ev.Kv.Lease, ev.Kv.ModRevision)
		}
		t.Fatalf("endpoint changed across a leader change (%d events)", len(wr.Events))
	case e := <-events:
		t.Fatalf("registration event %+v across a leader change", e)
	case <-time.After(2 * ttl):
	}
	if _, l, ok := stored(ctx, t, c.Client(), reg.Key()); !ok || l != lease {
		t.Fatalf("endpoint present %v under lease %x, want it under %x", ok, l, lease)
	}
}

func TestInteropWithEtcdManager(t *testing.T) {
	c := membertest.New(t, 3)
	cli := c.Client()
	ctx := testContext(t)

	t.Run("etcd's manager reads ours", func(t *testing.T) {
		md := map[string]any{"zone": "a"}
		reg, err := discovery.Register(ctx, cli, "ours", "127.0.0.1:2001", ttl, discovery.WithMetadata(md))
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Deregister(ctx)
		em, err := endpoints.NewManager(cli, "ours")
		if err != nil {
			t.Fatal(err)
		}
		// etcd's manager lists with a serializable read, which a member
		// that has not applied the registration yet answers without it.
		eventually(t, 5*time.Second, func() error {
			eps, err := em.List(ctx)
			if err != nil {
				return err
			}
			got, ok := eps["ours/127.0.0.1:2001"]
			if len(eps) != 1 || !ok || got.Addr != "127.0.0.1:2001" || fmt.Sprint(got.Metadata) != fmt.Sprint(md) {
				return fmt.Errorf("etcd's manager lists %+v", eps)
			}
			return nil
		})
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wch, err := em.NewWatchChannel(wctx)
		if err != nil {
			t.Fatal(err)
		}
		ups := <-wch
		if len(ups) != 1 || ups[0].Op != endpoints.Add || ups[0].Endpoint.Addr != "127.0.0.1:2001" {
			t.Fatalf("etcd's watch channel starts with %+v", ups)
		}
		if err := reg.Deregister(ctx); err != nil {
			t.Fatal(err)
		}
		ups = <-wch
		if len(ups) != 1 || ups[0].Op != endpoints.Delete || ups[0].Key != reg.Key() {
			t.Fatalf("etcd's watch channel after Deregister: %+v", ups)
		}
	})

	t.Run("ours reads etcd's manager", func(t *testing.T) {
		theirs := etcdRegister(ctx, t, cli, "theirs", "theirs/127.0.0.1:2002", "127.0.0.1:2002")
		ep, lease, ok := stored(ctx, t, cli, discovery.Key("theirs", "127.0.0.1:2002"))
		if !ok || ep.Addr != "127.0.0.1:2002" || lease != theirs {
			t.Fatalf("decoded %+v under lease %x (present %v)", ep, lease, ok)
		}
		// The resolver's side of this is in TestResolverFollowsTheStore.
	})
}

// etcdRegister stores addr under key with etcd's endpoints.Manager, under a
// lease of ttl that nobody keeps alive, and returns the lease.
func etcdRegister(ctx context.Context, t *testing.T, cli *clientv3.Client, service, key, addr string) clientv3.LeaseID {
	t.Helper()
	em, err := endpoints.NewManager(cli, service)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := em.AddEndpoint(ctx, key, endpoints.Endpoint{Addr: addr}, clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	return g.ID
}

// TestRegistrationOutlivesLostQuorum takes quorum away for longer than the
// TTL, as a long partition does: the holder is told its lease is lost,
// keeps trying, and registers again under a new lease once the cluster
// answers.
func TestRegistrationOutlivesLostQuorum(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := testContext(t)
	events := make(chan discovery.Event, 8)
	reg, err := discovery.Register(ctx, c.Client(), "quorum", "127.0.0.1:1006", ttl,
		discovery.WithNotify(func(e discovery.Event) { events <- e }))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Deregister(ctx)
	first := reg.Lease()
	c.Stop(1)
	c.Stop(2)
	lost := next(ctx, t, events)
	if lost.Kind != discovery.Lost || lost.Lease != first {
		t.Fatalf("event %+v without quorum, want Lost of lease %x", lost, first)
	}
	c.Restart(1)
	c.Restart(2)
	back := next(ctx, t, events)
	if back.Kind != discovery.Reregistered || back.Lease == first || back.Lease == 0 {
		t.Fatalf("event %+v after quorum came back, want Reregistered under a new lease", back)
	}
	if _, l, ok := stored(ctx, t, c.Client(), reg.Key()); !ok || l != back.Lease {
		t.Fatalf("endpoint present %v under lease %x, want it under %x", ok, l, back.Lease)
	}
}

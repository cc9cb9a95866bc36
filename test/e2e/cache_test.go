package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/client/cache"
)

// TestCacheSeesEtcdctlPuts is read leases tried as a new user would: a
// program reads through client/cache while etcdctl writes, and every Get
// after a put returns that put's value, also while a follower and then the
// leader are killed with SIGKILL.
func TestCacheSeesEtcdctlPuts(t *testing.T) {
	requireEtcdctl(t)
	c := startCluster(t, buildBinary(t))
	t.Cleanup(c.killAll)
	eps := c.endpoints()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cc, err := cache.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	// get reads through the cache until an answer comes (a session breaks
	// when the leader dies); any answer must be want.
	get := func(i int, want string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			kv, err := cc.Get(ctx, "/cached")
			cancel()
			if err == nil {
				got := "<missing>"
				if kv != nil {
					got = string(kv.Value)
				}
				if got != want {
					t.Fatalf("round %d: the cache answered %q after etcdctl put %q", i, got, want)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no answer from the cache in 15 s: %v", i, err)
			}
		}
	}
	// put writes with etcdctl through the live members, again after a
	// failure (the value is the round's own, so a put that failed but
	// applied changes nothing).
	put := func(i int, value string, live []string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			r := ctl(live, "", "--command-timeout=2s", "put", "/cached", value)
			if r.err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: etcdctl put failed for 15 s: %v", i, r)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	live := eps
	const rounds = 30
	for i := range rounds {
		switch i {
		case 10:
			_, leader := c.leader(t, eps)
			for _, m := range c.members {
				if m != leader {
					t.Logf("round %d: SIGKILL follower %s", i, m.name)
					c.kill(m)
					if err := c.start(m); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
		case 20:
			_, leader := c.leader(t, eps)
			t.Logf("round %d: SIGKILL leader %s", i, leader.name)
			c.kill(leader)
			live = nil
			for _, m := range c.members {
				if m != leader {
					live = append(live, m.clientURL)
				}
			}
		}
		value := fmt.Sprintf("v%d", i)
		put(i, value, live)
		// Several reads a round: after the first, the cache answers from
		// memory until the next put takes the value back.
		for range 5 {
			get(i, value)
		}
	}
	st := cc.Stats()
	t.Logf("cache stats after %d rounds: %+v", rounds, st)
	if st.Hits == 0 || st.Invalidations == 0 {
		t.Fatalf("the cache never hit or was never invalidated: %+v", st)
	}
}

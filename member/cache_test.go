package member_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/client/cache"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// A cache whose client knows only a follower opens its session with the
// leader itself, so the session, and with it invalidations and misses,
// does not depend on the follower: with the follower stopped, a write
// through the leader is still seen by the cache's next Get, on the same
// session. Through the follower's relay the session would break with it,
// and the Get would wait for a member the client cannot reach.
func TestCacheSessionGoesToTheLeader(t *testing.T) {
	c := membertest.New(t, 3)
	ctx := ctxT(t)
	cc, _, leader, f := cacheViaFollower(t, c)
	c.Stop(f)
	if _, err := c.Client(leader).Put(ctx, "k", "v2"); err != nil {
		t.Fatal(err)
	}
	kv, err := cc.Get(ctx, "k")
	if err != nil || kv == nil || string(kv.Value) != "v2" {
		t.Fatalf("Get after the follower stopped and k was written: %v, %v", kv, err)
	}
	if st := cc.Stats(); st.Reconnects != 0 || st.Invalidations != 1 {
		t.Errorf("stats %+v: want the one session, and the write's invalidation on it", st)
	}
}

// Members whose advertised client URLs the client cannot reach: the cache
// goes through the client's own endpoint, a follower that relays.
func TestCacheSessionFallsBackToTheRelay(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) {
		cfg.AdvertiseClientURLs = []string{"http://127.0.0.1:1"}
	}))
	ctx := ctxT(t)
	cc, viaFollower, _, _ := cacheViaFollower(t, c)
	if _, err := viaFollower.Put(ctx, "k", "v2"); err != nil {
		t.Fatal(err)
	}
	if kv, err := cc.Get(ctx, "k"); err != nil || kv == nil || string(kv.Value) != "v2" {
		t.Fatalf("Get after k was written: %v, %v", kv, err)
	}
	if st := cc.Stats(); st.Invalidations != 1 {
		t.Errorf("stats %+v: want the write's invalidation, through the relay", st)
	}
}

// cacheViaFollower puts k=v1 and returns a cache, on a client that knows
// only a follower, that has read it.
func cacheViaFollower(t *testing.T, c *membertest.Cluster) (cc *cache.Cache, viaFollower *clientv3.Client, leader, f int) {
	t.Helper()
	leader = c.WaitLeader()
	f = follower(c, leader)
	ctx := ctxT(t)
	viaFollower = c.Client(f)
	if _, err := viaFollower.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	cc, err := cache.New(viaFollower, cache.WithLogger(membertest.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	if kv, err := cc.Get(ctx, "k"); err != nil || kv == nil || string(kv.Value) != "v1" {
		t.Fatalf("first Get: %v, %v", kv, err)
	}
	return cc, viaFollower, leader, f
}

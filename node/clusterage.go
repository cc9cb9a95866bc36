package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// How long members have been part of the cluster, for the strict
// reconfiguration check (reconfig.go). etcd asks whether the member
// serving the change has been connected to every voter for
// HealthInterval; its members keep a connection to every other member.
// corenode's leader talks to each member, the others only to the leader,
// so a leader elected a moment ago has reached its followers only since
// its election. It then asks each follower it has not reached for long
// how long that follower has been in the cluster: since it last went
// without a leader for longer than an election timeout, or started.

// PeerAges asks another member for its ClusterAge. ClusterAge is called
// from the goroutine of a membership change, for several members at once;
// it must ask afresh, and return once ctx ends.
type PeerAges interface {
	ClusterAge(ctx context.Context, addr raft.ServerAddress) (time.Duration, error)
}

// SetPeerAges sets how the node asks other members for their ClusterAge;
// without it the strict check counts only what this leader saw itself.
func (n *Node) SetPeerAges(p PeerAges) {
	n.amu.Lock()
	n.ages = p
	n.amu.Unlock()
}

// clusterTime follows since when this member has had a leader, letting
// gaps shorter than an election timeout (a leadership transfer, an
// election won at once) pass.
type clusterTime struct {
	since      atomic.Int64 // unix nanoseconds; 0 while it has none for too long
	leaderless atomic.Int64 // unix nanoseconds since it has had no leader; 0 while it has one
}

// observe records whether the member knows a leader at now.
func (c *clusterTime) observe(known bool, now time.Time, grace time.Duration) {
	if !known {
		c.leaderless.CompareAndSwap(0, now.UnixNano())
		return
	}
	gap := c.leaderless.Swap(0)
	if c.since.Load() == 0 || (gap != 0 && now.UnixNano()-gap > int64(grace)) {
		c.since.Store(now.UnixNano())
	}
}

// age is how long the member has been in the cluster at now: zero while
// it has had no leader for longer than grace, or never had one.
func (c *clusterTime) age(now time.Time, grace time.Duration) time.Duration {
	since := c.since.Load()
	if gap := c.leaderless.Load(); since == 0 || (gap != 0 && now.UnixNano()-gap > int64(grace)) {
		return 0
	}
	return now.Sub(time.Unix(0, since))
}

// ClusterAge is how long this member has been part of the cluster with a
// leader, without a gap longer than an election timeout; zero when it is
// not now.
func (n *Node) ClusterAge() time.Duration {
	return n.clusterTime.age(time.Now(), n.cfg.ElectionTimeout)
}

// peersInCluster asks the given members, at once, whether they have been in
// the cluster for HealthInterval, and returns the IDs that have.
func (n *Node) peersInCluster(ctx context.Context, servers []raft.Server) map[raft.ServerID]bool {
	n.amu.Lock()
	ages := n.ages
	n.amu.Unlock()
	out := map[raft.ServerID]bool{}
	if ages == nil || len(servers) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if age, err := ages.ClusterAge(ctx, s.Address); err == nil && age >= HealthInterval {
				mu.Lock()
				out[s.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

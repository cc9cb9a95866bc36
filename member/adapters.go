package member

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lease"
	"github.com/corenode/corenode/node"
	"github.com/corenode/corenode/server"
)

// Adapters: what the leader-only services (checkpoint, integrity) need of
// the node and the request layer, in the narrow shapes they declare.

// proposer adapts the node to what the lease scheduler proposes.
type proposer struct{ n *node.Node }

func (p proposer) ProposeCheckpoint(ctx context.Context, c *lease.Checkpoint) error {
	_, err := p.n.Propose(ctx, fsm.OpLeaseCheckpoint, c)
	return err
}

func (p proposer) ProposeExpire(ctx context.Context, e *lease.Expire) error {
	_, err := p.n.Propose(ctx, fsm.OpLeaseExpire, e)
	return err
}

func (p proposer) PromoteLeases(fn func(int64, []lease.Lease)) { p.n.FSM().PromoteLeases(fn) }

// integrityCluster gives the corruption check the member's view of the
// cluster: its own store, and the others' hashes over the peer port.
type integrityCluster struct {
	n *node.Node
	s *server.Server
}

func (c integrityCluster) Self() uint64 { return c.n.ID() }

func (c integrityCluster) Voters() ([]uint64, error) { return c.n.VoterIDs() }

func (c integrityCluster) LocalHash(rev int64) (kv.KVHash, error) { return c.n.Store().HashKV(rev) }

func (c integrityCluster) PeerHash(ctx context.Context, id uint64, rev int64) (kv.KVHash, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.s.PeerHashKV(ctx, id, rev)
}

func (c integrityCluster) Applied() uint64 { return c.n.FSM().Applied() }

func (c integrityCluster) PeerApplied(ctx context.Context, id uint64) (uint64, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.s.PeerApplied(ctx, id)
}

func (c integrityCluster) Corrupt(id uint64) bool {
	return c.n.FSM().HasAlarm(id, pb.AlarmType_CORRUPT)
}

func (c integrityCluster) RaiseCorrupt(ctx context.Context, id uint64) error {
	return c.s.RaiseAlarm(ctx, id, pb.AlarmType_CORRUPT)
}

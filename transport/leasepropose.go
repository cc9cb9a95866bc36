package transport

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/lessor"
)

// LeaseProposer returns what the lessor replicates grants and revokes
// through: this server's write path (propose, which forwards to the
// leader). It belongs with the write path, and moves to the server layer
// with it.
func (s *Server) LeaseProposer() lessor.Proposer { return leaseProposer{s} }

type leaseProposer struct{ s *Server }

func (p leaseProposer) ProposeGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return propose[*pb.LeaseGrantResponse](p.s, ctx, fsm.OpLeaseGrant, r)
}

func (p leaseProposer) ProposeRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return propose[*pb.LeaseRevokeResponse](p.s, ctx, fsm.OpLeaseRevoke, r)
}

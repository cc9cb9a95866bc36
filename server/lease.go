package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/lessor"
)

// Leases is the Lease API the edge serves, as etcd's Lessor seam in
// v3rpc: the rules are lessor's, and this layer runs each call where it
// must run (the leader, for what only its clock knows) and checks the
// caller. Errors are those of the layers below, for the edge's table.
// Safe for concurrent use.
type Leases interface {
	LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error)
	LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error)
	// LeaseRenew is one keep-alive: the TTL the lease was renewed for.
	LeaseRenew(ctx context.Context, id int64) (ttl int64, err error)
	LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error)
	LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error)
}

var _ Leases = (*Server)(nil)

// SetLessor gives the server the lessor whose rules its Lease API
// applies; the lessor proposes through this server (LeaseProposer), so it
// is built after it. Call it before serving.
func (s *Server) SetLessor(l *lessor.Lessor) { s.lessor = l }

// LeaseGrant grants a lease (lessor.Grant: TTL bounds, the ID and its
// collision retry), proposed through the write pipeline.
func (s *Server) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return s.lessor.Grant(ctx, r)
}

// LeaseRevoke revokes a lease through the write pipeline; the caller's
// permission is checked where it applies.
func (s *Server) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return s.lessor.Revoke(ctx, r)
}

// LeaseRenew runs a keep-alive on the leader, whose clock alone decides
// expiry; a follower relays it over its one shared keep-alive stream
// (Peers.Renew). A keep-alive is idempotent, so it is sent again to a new
// leader. The caller needs write permission on every key the lease holds.
func (s *Server) LeaseRenew(ctx context.Context, id int64) (int64, error) {
	if err := s.Allow(ctx, func(ai auth.Info) error { return s.AuthorizeRenew(ai, id) }); err != nil {
		return 0, err
	}
	return OnLeader(s, ctx, true, func(ctx context.Context) (int64, error) {
		resp, err := s.lessor.Renew(ctx, &pb.LeaseKeepAliveRequest{ID: id})
		if err != nil {
			return 0, err
		}
		return resp.TTL, nil
	}, func(ctx context.Context, leader string) (int64, error) {
		return s.peers.Renew(ctx, leader, id)
	})
}

// LeaseTimeToLive answers from the leader: only its clock knows how much
// time is left.
func (s *Server) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return OnLeader(s, ctx, true, func(ctx context.Context) (*pb.LeaseTimeToLiveResponse, error) {
		return s.lessor.TimeToLive(ctx, r)
	}, func(ctx context.Context, leader string) (*pb.LeaseTimeToLiveResponse, error) {
		var resp pb.LeaseTimeToLiveResponse
		if err := s.peers.Call(ctx, leader, "/etcdserverpb.Lease/LeaseTimeToLive", r, &resp); err != nil {
			return nil, err
		}
		return &resp, nil
	})
}

// LeaseLeases lists the leases, linearizably. The header's revision is
// taken before the listing, so it is at most the one the list was read at.
func (s *Server) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	return Linearizable(s, ctx, func() (*pb.LeaseLeasesResponse, error) {
		if err := s.AuthorizeRead(ctx, r); err != nil {
			return nil, err
		}
		rev := s.node.Store().Rev()
		resp, err := s.lessor.Leases(ctx, r)
		if err != nil {
			return nil, err
		}
		resp.Header = &pb.ResponseHeader{Revision: rev}
		return resp, nil
	})
}

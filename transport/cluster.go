package transport

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// clusterService is the Cluster service's edge over the request layer
// (server.Cluster).
type clusterService struct{ s *Server }

func (c *clusterService) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	resp, err := c.s.cluster.MemberList(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = c.s.header(nil)
	return resp, nil
}

func (c *clusterService) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	resp, err := c.s.cluster.MemberAdd(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = c.s.header(nil)
	return resp, nil
}

func (c *clusterService) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	resp, err := c.s.cluster.MemberRemove(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = c.s.header(nil)
	return resp, nil
}

func (c *clusterService) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	resp, err := c.s.cluster.MemberUpdate(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = c.s.header(nil)
	return resp, nil
}

func (c *clusterService) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	resp, err := c.s.cluster.MemberPromote(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = c.s.header(nil)
	return resp, nil
}

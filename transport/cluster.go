package transport

import (
	"context"
	"net/url"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/corenode/corenode/server"
)

type clusterService struct{ s *Server }

// MemberList answers from this member's configuration, after a read index
// when the request asks for a linearizable list (clientv3 3.6 does by
// default; etcdctl 3.4 does not, and is answered even without a quorum).
func (c *clusterService) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	var ms []*pb.Member
	var err error
	if r.Linearizable {
		ms, err = c.s.members(ctx)
	} else {
		ms, err = c.s.node.Members()
	}
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	return &pb.MemberListResponse{Header: c.s.header(nil), Members: ms}, nil
}

// membersAfterChange lists the members for the answer to a membership
// change that succeeded. The change is committed, so this must not fail the
// call: a leader that removed itself has no leader to ask any more, and
// then the local list serves.
func (s *Server) membersAfterChange(ctx context.Context) []*pb.Member {
	if !isForwarded(ctx) {
		if ms, err := s.members(ctx); err == nil {
			return ms
		}
	}
	ms, _ := s.node.Members()
	return ms
}

// members lists the members once this member has applied every
// configuration change committed before the call.
func (s *Server) members(ctx context.Context) ([]*pb.Member, error) {
	return server.Linearizable(s.req, ctx, s.node.Members)
}

func (c *clusterService) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	added, err := server.OnLeader(c.s.req, ctx, false, func(ctx context.Context) (*pb.Member, error) {
		return c.s.node.AddMember(ctx, r.PeerURLs, r.IsLearner)
	}, remote(c.s, func(ctx context.Context, conn *grpc.ClientConn) (*pb.Member, error) {
		resp, err := pb.NewClusterClient(conn).MemberAdd(ctx, r)
		if err != nil {
			return nil, err
		}
		return resp.Member, nil
	}))
	if err != nil {
		return nil, err
	}
	return &pb.MemberAddResponse{Header: c.s.header(nil), Member: added, Members: c.s.membersAfterChange(ctx)}, nil
}

func (c *clusterService) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	ms, err := c.s.node.Members()
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	i := slices.IndexFunc(ms, func(m *pb.Member) bool { return m.ID == r.ID })
	if i < 0 {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	removed := ms[i]
	_, err = server.OnLeader(c.s.req, ctx, false, func(ctx context.Context) (*pb.MemberRemoveResponse, error) {
		if err := c.s.node.RemoveMember(ctx, r.ID); err != nil {
			return nil, err
		}
		if addr, err := peerAddr(removed.PeerURLs); err == nil && r.ID != c.s.node.ID() {
			go c.s.tellRemoved(r.ID, addr)
		}
		return nil, nil
	}, remote(c.s, func(ctx context.Context, conn *grpc.ClientConn) (*pb.MemberRemoveResponse, error) {
		return pb.NewClusterClient(conn).MemberRemove(ctx, r)
	}))
	if err != nil {
		return nil, err
	}
	return &pb.MemberRemoveResponse{Header: c.s.header(nil), Members: c.s.membersAfterChange(ctx)}, nil
}

func (c *clusterService) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	_, err := server.OnLeader(c.s.req, ctx, false, func(ctx context.Context) (*pb.MemberUpdateResponse, error) {
		return nil, c.s.node.UpdateMember(ctx, r.ID, r.PeerURLs)
	}, remote(c.s, func(ctx context.Context, conn *grpc.ClientConn) (*pb.MemberUpdateResponse, error) {
		return pb.NewClusterClient(conn).MemberUpdate(ctx, r)
	}))
	if err != nil {
		return nil, err
	}
	return &pb.MemberUpdateResponse{Header: c.s.header(nil), Members: c.s.membersAfterChange(ctx)}, nil
}

func (c *clusterService) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	_, err := server.OnLeader(c.s.req, ctx, false, func(ctx context.Context) (*pb.MemberPromoteResponse, error) {
		return nil, c.s.node.PromoteMember(ctx, r.ID)
	}, remote(c.s, func(ctx context.Context, conn *grpc.ClientConn) (*pb.MemberPromoteResponse, error) {
		return pb.NewClusterClient(conn).MemberPromote(ctx, r)
	}))
	if err != nil {
		return nil, err
	}
	return &pb.MemberPromoteResponse{Header: c.s.header(nil), Members: c.s.membersAfterChange(ctx)}, nil
}

// peerAddr is the raft address (host:port) of a member's peer URLs.
func peerAddr(urls []string) (string, error) {
	if len(urls) == 0 {
		return "", rpctypes.ErrGRPCMemberBadURLs
	}
	u, err := url.Parse(urls[0])
	if err != nil || u.Host == "" || u.Port() == "" {
		return "", rpctypes.ErrGRPCMemberBadURLs
	}
	return u.Host, nil
}

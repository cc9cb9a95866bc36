package transport

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The peer service carries what only members say to each other. Its
// messages are etcd's, so no code generation is needed.
var peerServiceDesc = grpc.ServiceDesc{
	ServiceName: "corenode.Peer",
	HandlerType: (*peerServer)(nil),
	Methods: []grpc.MethodDesc{
		peerMethod("Removed", peerServer.Removed),
		peerMethod("ReadIndex", peerServer.ReadIndex),
		peerMethod("Members", peerServer.Members),
		peerMethod("ClusterAge", peerServer.ClusterAge),
		peerMethod("Applied", peerServer.Applied),
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    proposeStreamDesc.StreamName,
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(peerServer).Propose(stream)
		},
	}},
	Metadata: "corenode/peer",
}

// peerMethod describes one unary method of the peer service: decode a Req,
// call the method on the registered peerServer.
func peerMethod[Req any, Resp any](name string, call func(peerServer, context.Context, *Req) (Resp, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			req := new(Req)
			if err := dec(req); err != nil {
				return nil, err
			}
			return call(srv.(peerServer), ctx, req)
		},
	}
}

type peerServer interface {
	// Removed tells a member the leader has removed it from the cluster.
	Removed(context.Context, *pb.Member) (*pb.MemberUpdateResponse, error)
	// ReadIndex confirms the leader's leadership, then names the index a
	// follower must apply before it serves a linearizable read
	// (RaftAppliedIndex in the response).
	ReadIndex(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error)
	// Propose carries a follower's forwarded writes (see proposalForwarder).
	Propose(grpc.ServerStream) error
	// Members lists the cluster's members, as of a read index: a member
	// joining the cluster finds the ID it was added with by its peer URLs
	// (AskMembers).
	Members(context.Context, *pb.MemberListRequest) (*pb.MemberListResponse, error)
	// ClusterAge is how long this member has been part of the cluster
	// with a leader (node.ClusterAge), for a new leader's strict
	// reconfiguration check.
	ClusterAge(context.Context, *emptypb.Empty) (*durationpb.Duration, error)
	// Applied is this member's applied index (RaftAppliedIndex) and then
	// its revision (the header's), for the leader's corruption check.
	Applied(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error)
}

type peerService struct{ s *Server }

func (p *peerService) Propose(stream grpc.ServerStream) error { return p.s.serveProposals(stream) }

func (p *peerService) Removed(ctx context.Context, m *pb.Member) (*pb.MemberUpdateResponse, error) {
	if err := p.s.req.Removed(m.ID); err != nil {
		return nil, mapErr(ctx, err)
	}
	return &pb.MemberUpdateResponse{}, nil
}

func (p *peerService) Members(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	ms, err := p.s.req.Members(ctx)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	return &pb.MemberListResponse{Header: p.s.header(nil), Members: ms}, nil
}

func (p *peerService) Applied(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	index, rev := p.s.req.Applied()
	return &pb.StatusResponse{Header: &pb.ResponseHeader{Revision: rev}, RaftAppliedIndex: index}, nil
}

func (p *peerService) ClusterAge(context.Context, *emptypb.Empty) (*durationpb.Duration, error) {
	return durationpb.New(p.s.req.ClusterAge()), nil
}

// ClusterAge asks the member at peer address addr how long it has been
// part of the cluster (node.PeerAges).
func (s *Server) ClusterAge(ctx context.Context, addr raft.ServerAddress) (time.Duration, error) {
	conn, err := s.peers.Conn(string(addr))
	if err != nil {
		return 0, err
	}
	var d durationpb.Duration
	if err := conn.Invoke(ctx, "/corenode.Peer/ClusterAge", &emptypb.Empty{}, &d); err != nil {
		return 0, err
	}
	return d.AsDuration(), nil
}

func (p *peerService) ReadIndex(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	index, err := p.s.req.ReadIndex(ctx)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	return &pb.StatusResponse{RaftAppliedIndex: index}, nil
}

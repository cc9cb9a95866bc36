package transport

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/server"
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
}

type peerService struct{ s *Server }

func (p *peerService) Propose(stream grpc.ServerStream) error { return p.s.serveProposals(stream) }

func (p *peerService) Removed(ctx context.Context, m *pb.Member) (*pb.MemberUpdateResponse, error) {
	if m.ID != p.s.node.ID() {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	p.s.node.MarkRemoved("the leader said so")
	return &pb.MemberUpdateResponse{}, nil
}

func (p *peerService) Members(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	ms, err := p.s.members(ctx)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	return &pb.MemberListResponse{Header: p.s.header(nil), Members: ms}, nil
}

func (p *peerService) ClusterAge(context.Context, *emptypb.Empty) (*durationpb.Duration, error) {
	return durationpb.New(p.s.node.ClusterAge()), nil
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

// tellRemoved lets a removed member know, so it stops rather than campaign
// forever: the leader stops replicating to it, so it may never see its own
// removal. Best effort; it also notices when it applies the configuration.
func (s *Server) tellRemoved(id uint64, addr string) {
	conn, err := s.peers.Conn(addr)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, "/corenode.Peer/Removed", &pb.Member{ID: id}, new(pb.MemberUpdateResponse)); err != nil {
		s.log.Info("could not tell a removed member", "id", fmt.Sprintf("%x", id), "err", err)
	}
}

func (s *Server) publish(ctx context.Context, m *pb.Member) (*pb.MemberUpdateResponse, error) {
	_, err := server.Propose[pb.Member](s.req, ctx, fsm.OpPublish, m)
	if err != nil {
		return nil, err
	}
	return &pb.MemberUpdateResponse{Header: s.header(nil)}, nil
}

// PublishSelf records this member's name and URLs in the replicated member
// table, retrying until it succeeds or ctx ends, as etcd members publish
// their attributes once they join. It returns nil once the table holds
// them, ctx's error if ctx ended first.
func (s *Server) PublishSelf(ctx context.Context) error {
	self := s.node.Self()
	for {
		if cur := s.node.FSM().Member(self.ID); cur != nil && published(cur, self) {
			if !slices.Equal(cur.PeerURLs, self.PeerURLs) {
				s.log.Warn("the cluster reaches this member at other peer URLs than it advertises (etcdctl member update changed them); "+
					"restart it with --initial-advertise-peer-urls set to them", "cluster", cur.PeerURLs, "advertised", self.PeerURLs)
			}
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.publish(cctx, self)
		cancel()
		if err == nil {
			s.log.Info("published member attributes", "name", self.Name, "client-urls", self.ClientURLs)
			return nil
		}
		s.log.Debug("publish failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// published reports whether the cluster's record cur holds what self
// publishes: its name and client URLs, and some peer URLs (the cluster's
// own, if it recorded them when it added the member).
func published(cur, self *pb.Member) bool {
	return cur.Name == self.Name && slices.Equal(cur.ClientURLs, self.ClientURLs) && len(cur.PeerURLs) > 0
}

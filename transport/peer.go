package transport

import (
	"context"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/corenode/corenode/fsm"
)

// The peer service carries what only members say to each other. Its
// messages are etcd's, so no code generation is needed.
var peerServiceDesc = grpc.ServiceDesc{
	ServiceName: "corenode.Peer",
	HandlerType: (*peerServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Publish",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			m := new(pb.Member)
			if err := dec(m); err != nil {
				return nil, err
			}
			return srv.(peerServer).Publish(ctx, m)
		},
	}},
	Metadata: "corenode/peer",
}

type peerServer interface {
	Publish(context.Context, *pb.Member) (*pb.MemberUpdateResponse, error)
}

type peerService struct{ s *Server }

func (p *peerService) Publish(ctx context.Context, m *pb.Member) (*pb.MemberUpdateResponse, error) {
	return p.s.publish(ctx, m)
}

func (s *Server) publish(ctx context.Context, m *pb.Member) (*pb.MemberUpdateResponse, error) {
	_, err := propose(s, ctx, fsm.OpPublish, m, func(ctx context.Context, c *grpc.ClientConn) (*pb.Member, error) {
		if err := c.Invoke(ctx, "/corenode.Peer/Publish", m, new(pb.MemberUpdateResponse)); err != nil {
			return nil, err
		}
		return m, nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberUpdateResponse{Header: s.header(nil)}, nil
}

// PublishSelf records this member's name and URLs in the replicated member
// table, retrying until it succeeds or ctx ends, as etcd members publish
// their attributes once they join.
func (s *Server) PublishSelf(ctx context.Context) {
	self := s.node.Self()
	for {
		if cur := s.node.FSM().Member(self.ID); cur != nil && sameMember(cur, self) {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.publish(cctx, self)
		cancel()
		if err == nil {
			s.log.Info("published member attributes", "name", self.Name, "client-urls", self.ClientURLs)
			return
		}
		s.log.Debug("publish failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func sameMember(a, b *pb.Member) bool {
	return a.ID == b.ID && a.Name == b.Name && slices.Equal(a.PeerURLs, b.PeerURLs) && slices.Equal(a.ClientURLs, b.ClientURLs)
}

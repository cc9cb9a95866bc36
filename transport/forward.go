package transport

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/corenode/corenode/server"
)

// Forwarding is decided in the request layer (server.OnLeader); what is
// here is its wire: a leader-only call sent to the leader's peer port.

// remote is the call of a unary gRPC method on the leader at a peer
// address, marked as forwarded, its errors translated for the request
// layer (peerErr).
func remote[T any](s *Server, call func(context.Context, *grpc.ClientConn) (T, error)) func(context.Context, string) (T, error) {
	return func(ctx context.Context, leader string) (T, error) {
		var zero T
		conn, err := s.peers.Conn(leader)
		if err != nil {
			return zero, server.ErrNotSent
		}
		resp, err := call(forwarded(ctx), conn)
		return resp, peerErr(err)
	}
}

// leaderConn returns a connection to the leader's peer port, or nil when
// this member leads, waiting a little for an election to finish.
func (s *Server) leaderConn(ctx context.Context) (*grpc.ClientConn, error) {
	addr, err := s.req.Leader(ctx)
	if err != nil || addr == "" {
		return nil, err
	}
	return s.peers.Conn(addr)
}

func isForwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

// requireLeader serves clientv3.WithRequireLeader, as etcd does: a stream
// whose client asked for a leader is refused with ErrGRPCNoLeader when this
// member has none, and the returned channel is closed once the member has
// been without a leader for an election timeout, so the client moves to a
// member that can hear the cluster instead of waiting on one cut off from
// it. For other streams the channel is nil (never closed).
func (s *Server) requireLeader(ctx context.Context) (<-chan struct{}, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(rpctypes.MetadataRequireLeaderKey); len(v) == 0 || v[0] != rpctypes.MetadataHasLeader {
		return nil, nil
	}
	if s.req.LeaderID() == 0 {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	lost := make(chan struct{})
	go func() {
		for {
			// Taken before the leader is looked at, so no change is missed.
			changed := s.req.LeaderChange()
			if s.req.LeaderID() == 0 {
				t := time.NewTimer(s.grace)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-changed:
					t.Stop()
					continue
				case <-t.C:
				}
				if s.req.LeaderID() == 0 {
					close(lost)
					return
				}
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return lost, nil
}

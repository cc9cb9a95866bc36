package transport

import (
	"context"

	"google.golang.org/grpc"
)

// A restarted member serves clients only once its state includes every
// write it had applied before the restart, and a joining one once it holds
// the cluster's (node.CaughtUp). Until then a call waits, for at most two
// election timeouts (a restart takes about 70 ms; a member cut off from a
// quorum never catches up), and then
// fails with Unavailable, which etcd's clients take as "try another
// member". Status is exempt: an operator looks at a member that is
// catching up to see why, and it reports the indexes, not the state.

// statusMethod is exempt from the wait.
const statusMethod = "/etcdserverpb.Maintenance/Status"

// CatchUpOptions returns the client port's interceptors that hold calls
// until this member has caught up after a restart. They go before the auth
// interceptors: auth enabled after the member's snapshot is known only
// after the catch-up.
func (s *Server) CatchUpOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := s.awaitCaughtUp(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := s.awaitCaughtUp(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

func (s *Server) awaitCaughtUp(ctx context.Context, method string) error {
	select {
	case <-s.req.CaughtUp():
		return nil // every call but the first few: no timer
	default:
	}
	if method == statusMethod {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*s.grace)
	defer cancel()
	return s.req.AwaitCaughtUp(ctx)
}

package transport

import (
	"context"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A restarted member serves clients only once its state includes every
// write it had applied before the restart, and a joining one once it holds
// the cluster's (node.CaughtUp). Until then a call waits, for at most two
// election timeouts (a restart takes about 70 ms; a member cut off from a
// quorum never catches up), and then
// fails with Unavailable, which etcd's clients take as "try another
// member". Status waits as long, but is answered when the wait runs out: an
// operator looks at a member that is catching up to see why, and it
// reports the indexes and says it is catching up. It waits at all because
// its header names the member's revision: a joiner answered revision 1
// while the cluster was at thousands (etcd's robustness suite's
// MemberReplace; etcd serves no client before its member has applied what
// the cluster had committed). The gRPC health service does not wait: a
// probe is to hear NOT_SERVING at once, not time out.

// exempt are the methods that do not wait.
var exempt = map[string]bool{
	healthpb.Health_Check_FullMethodName: true,
	healthpb.Health_List_FullMethodName:  true,
	healthpb.Health_Watch_FullMethodName: true,
}

// answeredAnyway are the methods that wait, and are answered when the wait
// runs out.
var answeredAnyway = map[string]bool{
	"/etcdserverpb.Maintenance/Status": true,
}

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
	if exempt[method] {
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, 2*s.grace)
	defer cancel()
	err := s.req.AwaitCaughtUp(wait)
	if err != nil && answeredAnyway[method] && ctx.Err() == nil {
		return nil
	}
	return err
}

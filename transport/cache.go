package transport

import (
	"context"
	"io"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/api/cachepb"
	"github.com/corenode/corenode/auth"
)

// cacheService is the read-lease cache's edge: the leader serves a session
// (serveSession over server.OpenCacheSession), any other member relays it
// to the leader whole.
type cacheService struct {
	cachepb.UnimplementedCacheServer
	s *Server
}

func (c *cacheService) Session(stream cachepb.Cache_SessionServer) error {
	stream = &checkedSession{Cache_SessionServer: stream, s: c.s}
	err := serveSession(c.s.req, stream)
	if !notLeader(err) {
		return err
	}
	if isForwarded(stream.Context()) {
		// Relayed here by a member that took this one for the leader.
		return rpctypes.ErrGRPCNotLeader
	}
	return c.relay(stream)
}

// relay pipes a session to the leader until either side ends it or this
// member sees the leader change: the client then opens a new session,
// which reaches the new leader. Messages keep their order both ways, which
// the session's ordering promise needs.
func (c *cacheService) relay(stream cachepb.Cache_SessionServer) error {
	changed := c.s.req.LeaderChange()
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	conn, err := c.s.leaderConn(ctx)
	if err != nil {
		return mapErr(ctx, err)
	}
	if conn == nil {
		// This member became the leader meanwhile; its term's state may not
		// be built yet, so the client retries.
		return rpctypes.ErrGRPCLeaderChanged
	}
	up, err := cachepb.NewCacheClient(conn).Session(metadata.AppendToOutgoingContext(ctx, forwardedKey, "1"))
	if err != nil {
		return err
	}
	done := make(chan error, 2)
	go func() {
		for {
			req, err := stream.Recv()
			if err == io.EOF {
				// The client released its leases: the leader must see the
				// same clean end, and then ends the session itself.
				if err := up.CloseSend(); err != nil {
					done <- err
				}
				return
			}
			if err != nil {
				done <- err
				return
			}
			if err := up.Send(req); err != nil {
				done <- err
				return
			}
		}
	}()
	go func() {
		for {
			resp, err := up.Recv()
			if err == io.EOF {
				done <- nil
				return
			}
			if err != nil {
				done <- err
				return
			}
			if err := stream.Send(resp); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-changed:
		return rpctypes.ErrGRPCLeaderChanged
	}
}

// checkedSession answers a cached read the caller may not make with the
// refusal, for that read alone, as a Range of the key would be refused;
// the others pass. A relayed session is checked here, on the member the
// client reached, where its credentials are known.
type checkedSession struct {
	cachepb.Cache_SessionServer
	s  *Server
	mu sync.Mutex // orders this type's refusals with the session's own sends
}

func (c *checkedSession) Send(m *cachepb.SessionResponse) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Cache_SessionServer.Send(m)
}

func (c *checkedSession) Recv() (*cachepb.SessionRequest, error) {
	for {
		req, err := c.Cache_SessionServer.Recv()
		if err != nil {
			return nil, err
		}
		g := req.GetGet()
		if g == nil {
			return req, nil
		}
		err = c.s.allow(c.Context(), func(ai auth.Info) error { return c.s.authStore().IsRangePermitted(ai, g.Key, nil) })
		if err == nil {
			return req, nil
		}
		st, _ := status.FromError(err)
		refusal := &cachepb.GetResponse{Id: g.Id, Code: uint32(st.Code()), Message: st.Message()}
		if err := c.Send(&cachepb.SessionResponse{Msg: &cachepb.SessionResponse_Get{Get: refusal}}); err != nil {
			return nil, err
		}
	}
}

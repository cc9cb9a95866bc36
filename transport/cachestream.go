package transport

import (
	"context"
	"errors"
	"io"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/api/cachepb"

	"github.com/corenode/corenode/server"
)

// maxSessionGets bounds the reads one session has in progress on the
// leader. A client that sends Gets faster than they are answered waits in
// its own stream's flow control.
const maxSessionGets = 256

// serveSession carries one cache session on the leader over its stream
// until the client ends it or the leader's term ends: requests in, to the
// session (server.CacheSession, whose rules decide every answer), and the
// session's messages out, in the order it queued them. It returns
// server.ErrNotLeader at once when this member has no leader term
// built, so the caller can relay the session to the leader.
func serveSession(req server.Streams, stream cachepb.Cache_SessionServer) error {
	s, err := req.OpenCacheSession(stream.Context())
	if err != nil {
		return err
	}
	defer s.Close()
	ctx := s.Context()
	sendErr := make(chan error, 1)
	go func() { sendErr <- sendSession(s, stream) }()
	recvErr := make(chan error, 1)
	sem := make(chan struct{}, maxSessionGets)
	go func() {
		for {
			req, err := stream.Recv()
			if err == io.EOF {
				// The client ends its session this way only once it
				// answers nothing from memory any more (client/cache's
				// Close); see server.CacheSession.Release.
				s.Release()
				recvErr <- nil
				return
			}
			if err != nil {
				recvErr <- err
				return
			}
			switch r := req.Msg.(type) {
			case *cachepb.SessionRequest_Get:
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					recvErr <- ctx.Err()
					return
				}
				g := server.CacheGet{ID: r.Get.Id, Key: r.Get.Key, Hits: r.Get.Hits}
				go func() {
					defer func() { <-sem }()
					s.Get(ctx, g)
				}()
			case *cachepb.SessionRequest_Ack:
				s.Ack(r.Ack.Seq)
			}
		}
	}()
	select {
	case err := <-recvErr:
		return err
	case err := <-sendErr:
		return err
	case <-s.Ended():
		return server.ErrReadLeaseChanged
	}
}

// sendSession sends the session's messages until it ends.
func sendSession(s *server.CacheSession, stream cachepb.Cache_SessionServer) error {
	for {
		msgs, err := s.Next()
		if err != nil {
			return status.Error(codes.Unavailable, "read-lease session ended: "+err.Error())
		}
		for _, msg := range msgs {
			if err := stream.Send(sessionResponse(msg)); err != nil {
				return err
			}
		}
	}
}

// sessionResponse is msg on the wire.
func sessionResponse(msg server.CacheMessage) *cachepb.SessionResponse {
	if inv := msg.Invalidate; inv != nil {
		return &cachepb.SessionResponse{Msg: &cachepb.SessionResponse_Invalidate{
			Invalidate: &cachepb.Invalidate{Seq: inv.Seq, Keys: inv.Keys}}}
	}
	a := msg.Answer
	resp := &cachepb.GetResponse{Id: a.ID}
	if a.Err != nil {
		st := getStatus(a.Err)
		resp.Code, resp.Message = uint32(st.Code()), st.Message()
	} else {
		resp.Revision, resp.LeaseMs = a.Revision, a.Lease.Milliseconds()
		if kv := a.KV; kv != nil {
			resp.Kv = &cachepb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
				Version: kv.Version, Value: kv.Value, Lease: kv.Lease}
		}
	}
	return &cachepb.SessionResponse{Msg: &cachepb.SessionResponse_Get{Get: resp}}
}

// getStatus is the code and message a failed cached read is answered
// with. A request without a key is refused as etcd refuses a Range of it;
// any other failure is a read that could not be confirmed here (leadership
// lost, the member stopping), which another try may pass: Unavailable, or
// the context's own code.
func getStatus(err error) *status.Status {
	if errors.Is(err, server.ErrCacheEmptyKey) {
		err = rpctypes.ErrGRPCEmptyKey
	}
	if st, ok := status.FromError(err); ok {
		return st
	}
	code := codes.Unavailable
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.New(code, err.Error())
}

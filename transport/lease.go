package transport

import (
	"context"
	"errors"
	"io"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/lessor"
	"github.com/corenode/corenode/server"
)

// SetLeases enables the Lease service, whose rules (and counters) l
// applies.
func (s *Server) SetLeases(l *lessor.Lessor) { s.leases = l }

type leaseService struct{ s *Server }

func (l *leaseService) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	resp, err := l.s.leases.Grant(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	l.s.header(resp.Header)
	return resp, nil
}

func (l *leaseService) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	resp, err := l.s.leases.Revoke(ctx, r)
	if err != nil {
		return nil, err
	}
	l.s.header(resp.Header)
	return resp, nil
}

func (l *leaseService) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	// Only the leader knows how much time is left.
	resp, err := server.OnLeader(l.s.req, ctx, true, func(ctx context.Context) (*pb.LeaseTimeToLiveResponse, error) {
		return l.s.leases.TimeToLive(ctx, r)
	}, remote(l.s, func(ctx context.Context, c *grpc.ClientConn) (*pb.LeaseTimeToLiveResponse, error) {
		return pb.NewLeaseClient(c).LeaseTimeToLive(ctx, r)
	}))
	if err != nil {
		return nil, err
	}
	// The revision is the answering leader's; the rest is this member's.
	resp.Header = l.s.header(resp.Header)
	return resp, nil
}

func (l *leaseService) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	resp, err := server.Linearizable(l.s.req, ctx, func() (*pb.LeaseLeasesResponse, error) {
		if err := l.s.authorizeRead(ctx, r); err != nil {
			return nil, err
		}
		header := l.s.header(nil)
		resp, err := l.s.leases.Leases(ctx, r)
		if err != nil {
			return nil, err
		}
		resp.Header = header
		return resp, nil
	})
	if err != nil {
		return nil, err
	}
	l.s.header(resp.Header)
	return resp, nil
}

// keepAliveConcurrency bounds the keep-alives of one stream in flight at
// once; they share leadership confirmations, so more adds little.
const keepAliveConcurrency = 256

func (l *leaseService) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	var smu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, keepAliveConcurrency)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				recvErr <- nil
				return
			}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				// The header is taken before the renewal, as etcd does: its
				// revision is then at most the one the renewal happened at.
				header := l.s.header(nil)
				if err := l.s.allow(ctx, func(ai auth.Info) error { return l.s.req.AuthorizeRenew(ai, req.ID) }); err != nil {
					cancel(err)
					return
				}
				ttl, err := l.s.renew(ctx, req.ID)
				if err != nil {
					cancel(err)
					return
				}
				smu.Lock()
				err = stream.Send(&pb.LeaseKeepAliveResponse{Header: header, ID: req.ID, TTL: ttl})
				smu.Unlock()
				if err != nil {
					cancel(err)
				}
			}()
		}
	}()
	select {
	case err := <-recvErr:
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	case <-ctx.Done():
		if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return mapErr(ctx, err)
		}
		return nil
	}
}

// renew runs a keep-alive on the leader, forwarding it from a follower over
// the member's one shared keep-alive stream.
func (s *Server) renew(ctx context.Context, id int64) (int64, error) {
	return server.OnLeader(s.req, ctx, true, func(ctx context.Context) (int64, error) {
		resp, err := s.leases.Renew(ctx, &pb.LeaseKeepAliveRequest{ID: id})
		if err != nil {
			return 0, err
		}
		return resp.TTL, nil
	}, func(ctx context.Context, leader string) (int64, error) {
		conn, err := s.peers.Conn(leader)
		if err != nil {
			return 0, server.ErrNotSent
		}
		return s.keepAlive.renew(ctx, conn, id)
	})
}

// kaForwarder multiplexes a follower's forwarded keep-alives onto one
// stream to the leader and routes answers back by lease ID.
//
// It is not proposalForwarder, on purpose. A keep-alive is idempotent and
// touches only the leader's memory: it travels as etcd's own
// LeaseKeepAlive on the leader's client port, is matched by lease ID, and
// is simply sent again when a stream breaks. A proposal is a raft entry
// whose outcome is unknown once it was handed to a stream that broke, so
// that multiplexer numbers requests and tracks what was sent
// (corenode.Peer/Propose). Carrying keep-alives there would need a record
// kind an older leader does not know: during a rolling upgrade every
// keep-alive an upgraded follower forwarded to an older leader would fail,
// and its holders' leases would expire.
type kaForwarder struct {
	mu      sync.Mutex
	conn    *grpc.ClientConn
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	waiters map[int64][]chan *pb.LeaseKeepAliveResponse
}

// renew sends a keep-alive for id on the stream to conn's member and waits
// for its answer until ctx ends (the request layer ends it grace after the
// leader changed).
func (f *kaForwarder) renew(ctx context.Context, conn *grpc.ClientConn, id int64) (int64, error) {
	ch := make(chan *pb.LeaseKeepAliveResponse, 1)
	f.mu.Lock()
	if f.stream == nil || f.conn != conn {
		f.resetLocked()
		sctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), forwardedKey, "1"))
		stream, err := pb.NewLeaseClient(conn).LeaseKeepAlive(sctx)
		if err != nil {
			cancel()
			f.mu.Unlock()
			return 0, server.ErrNotSent
		}
		f.conn, f.stream, f.cancel = conn, stream, cancel
		f.waiters = map[int64][]chan *pb.LeaseKeepAliveResponse{}
		go f.receive(stream)
	}
	f.waiters[id] = append(f.waiters[id], ch)
	if err := f.stream.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
		f.resetLocked()
		f.mu.Unlock()
		return 0, server.ErrNotSent
	}
	f.mu.Unlock()
	select {
	case resp, ok := <-ch:
		if !ok {
			// The stream broke; a keep-alive is idempotent, so the caller
			// may send it again to whoever leads now.
			return 0, server.ErrNotLeader
		}
		return resp.TTL, nil
	case <-ctx.Done():
		f.drop(id, ch)
		return 0, ctx.Err()
	}
}

func (f *kaForwarder) drop(id int64, ch chan *pb.LeaseKeepAliveResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ws := f.waiters[id]
	for i, w := range ws {
		if w == ch {
			f.waiters[id] = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
}

func (f *kaForwarder) receive(stream pb.Lease_LeaseKeepAliveClient) {
	for {
		resp, err := stream.Recv()
		f.mu.Lock()
		if f.stream != stream {
			f.mu.Unlock()
			return
		}
		if err != nil {
			f.resetLocked()
			f.mu.Unlock()
			return
		}
		if ws := f.waiters[resp.ID]; len(ws) > 0 {
			ws[0] <- resp
			f.waiters[resp.ID] = ws[1:]
			if len(ws) == 1 {
				delete(f.waiters, resp.ID)
			}
		}
		f.mu.Unlock()
	}
}

// resetLocked drops the stream and fails every waiter on it.
func (f *kaForwarder) resetLocked() {
	if f.cancel != nil {
		f.cancel()
	}
	for _, ws := range f.waiters {
		for _, w := range ws {
			close(w)
		}
	}
	f.stream, f.conn, f.cancel, f.waiters = nil, nil, nil, nil
}

func (f *kaForwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resetLocked()
}

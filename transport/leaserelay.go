package transport

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/corenode/corenode/server"
)

// Renew implements server.Peers: the keep-alive goes to the leader on this
// member's one shared keep-alive stream.
func (p *PeerClient) Renew(ctx context.Context, leader string, id int64) (int64, error) {
	conn, err := p.Conn(leader)
	if err != nil {
		return 0, server.ErrNotSent
	}
	return p.keepAlive.renew(ctx, conn, id)
}

// kaForwarder multiplexes a follower's forwarded keep-alives onto one
// stream to the leader and routes answers back by lease ID.
//
// It is not proposalForwarder, on purpose. A keep-alive is idempotent and
// touches only the leader's memory: it travels as etcd's own
// LeaseKeepAlive to the leader's peer port (which serves the client
// services too), is matched by lease ID, and
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

package transport

import (
	"context"
	"errors"
	"io"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// leaseService is the Lease service's edge: each call runs in the
// request layer (server.Leases), its error goes through the one table, and
// its header says this member's view.
type leaseService struct{ s *Server }

func (l *leaseService) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	resp, err := l.s.leases.LeaseGrant(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	l.s.header(resp.Header)
	return resp, nil
}

func (l *leaseService) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	resp, err := l.s.leases.LeaseRevoke(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	l.s.header(resp.Header)
	return resp, nil
}

func (l *leaseService) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp, err := l.s.leases.LeaseTimeToLive(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	// The revision is the answering leader's; the rest is this member's.
	resp.Header = l.s.header(resp.Header)
	return resp, nil
}

func (l *leaseService) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	resp, err := l.s.leases.LeaseLeases(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
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
	var smu sync.Mutex // one Send at a time
	// The handler waits for the renewals it started; the receiving
	// goroutine, which outlives it until the stream ends, starts none once
	// the handler is done (a WaitGroup's Add must not race its Wait).
	var (
		wmu  sync.Mutex
		done bool
		wg   sync.WaitGroup
	)
	defer func() {
		wmu.Lock()
		done = true
		wmu.Unlock()
		wg.Wait()
	}()
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
			wmu.Lock()
			if done {
				wmu.Unlock()
				return
			}
			wg.Add(1)
			wmu.Unlock()
			go func() {
				defer func() { <-sem; wg.Done() }()
				// The header is taken before the renewal, as etcd does: its
				// revision is then at most the one the renewal happened at.
				header := l.s.header(nil)
				ttl, err := l.s.leases.LeaseRenew(ctx, req.ID)
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

// Package lessor is the Lease API below the edge: the rules a member
// applies to a lease request before raft (etcd's TTL bounds, the choice of
// a lease ID and its retry on a collision) and the answers only the
// leader's lease clock can give (TimeToLive, keep-alive). transport decodes
// a request, calls the Lessor, maps its error and fills the header.
package lessor

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/lease"
)

// ErrNotLeader is a leader-only answer asked of a member that does not
// lead, or leads but has not yet taken over the lease clock; the caller
// asks the leader.
var ErrNotLeader = errors.New("lessor: not the leader")

// ErrTTLTooLarge refuses a grant above lease.MaxTTL.
var ErrTTLTooLarge = errors.New("lessor: TTL is too large")

// Timer is the leader's lease clock (checkpoint.Scheduler over
// lease.Tracker). Both methods answer only on the leader and may be called
// from any number of goroutines.
type Timer interface {
	// Renew extends lease id by its TTL and returns that TTL, once the
	// renewal is safe to announce.
	Renew(ctx context.Context, id int64) (ttl int64, err error)
	// Remaining is id's time left and granted TTL, in seconds; ok is false
	// if the clock does not track id.
	Remaining(id int64) (remaining, granted int64, ok bool)
}

// State is what the lessor reads of the replicated state: the leases
// applied and the keys attached to each. Safe for concurrent use.
type State interface {
	LeaseExists(id int64) bool
	LeaseKeys(id int64) [][]byte
}

// Barrier makes the leader's local state linearizable to read
// (node.Node.ReadBarrier); it fails on a member that does not lead.
type Barrier func(ctx context.Context) error

// Lessor applies the lease rules. Its methods may be called concurrently.
type Lessor struct {
	timer   Timer
	state   State
	barrier Barrier
	minTTL  int64
	newID   func() int64
}

// New returns a Lessor. minTTL is the smallest TTL granted, in seconds:
// smaller requests are raised to it, as etcd does, because a lease
// shorter than an election could expire during one.
func New(timer Timer, state State, barrier Barrier, minTTL int64) *Lessor {
	return &Lessor{timer: timer, state: state, barrier: barrier, minTTL: minTTL, newID: randomID}
}

// idAttempts bounds the retries of a grant whose chosen ID was taken.
const idAttempts = 4

// Grant grants the lease r asks for through propose, which reaches the
// leader from any member and returns the applied grant's answer. A TTL past
// lease.MaxTTL is refused; a smaller one than the minimum is raised to it.
// Without an ID in r, one is chosen here, before proposing, so applying
// the grant stays deterministic; a collision is caught when it applies
// and the grant is proposed again with another ID.
func (l *Lessor) Grant(ctx context.Context, r *pb.LeaseGrantRequest,
	propose func(context.Context, *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error),
) (*pb.LeaseGrantResponse, error) {
	if r.TTL > lease.MaxTTL {
		return nil, ErrTTLTooLarge
	}
	ttl := max(r.TTL, l.minTTL)
	for attempt := 1; ; attempt++ {
		req := &pb.LeaseGrantRequest{ID: r.ID, TTL: ttl}
		if r.ID == 0 {
			req.ID = l.newID()
		}
		resp, err := propose(ctx, req)
		if r.ID == 0 && taken(err) && attempt < idAttempts {
			continue
		}
		return resp, err
	}
}

// taken reports whether a grant failed because its ID exists: the lease
// table's error when the grant applied on this member, etcd's gRPC error
// when the leader answered a forwarded one.
func taken(err error) bool {
	return errors.Is(err, lease.ErrLeaseExists) || errors.Is(err, rpctypes.ErrGRPCLeaseExist)
}

// TimeToLive answers r on the leader, from its lease clock, after a read
// barrier: TTL -1 for a lease that does not exist (etcd's answer), and
// ErrNotLeader while the clock has not taken over a lease that exists (a
// new leader promoting its tracker). The caller fills the header.
func (l *Lessor) TimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := l.barrier(ctx); err != nil {
		return nil, err
	}
	remaining, granted, ok := l.timer.Remaining(r.ID)
	if !ok {
		if !l.state.LeaseExists(r.ID) {
			return &pb.LeaseTimeToLiveResponse{ID: r.ID, TTL: -1}, nil
		}
		return nil, ErrNotLeader
	}
	resp := &pb.LeaseTimeToLiveResponse{ID: r.ID, TTL: remaining, GrantedTTL: granted}
	if r.Keys {
		resp.Keys = l.state.LeaseKeys(r.ID)
	}
	return resp, nil
}

// Renew is a keep-alive on the leader: the TTL the lease was extended by.
func (l *Lessor) Renew(ctx context.Context, id int64) (int64, error) {
	return l.timer.Renew(ctx, id)
}

// randomID is a random positive lease ID.
func randomID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := int64(binary.BigEndian.Uint64(b[:]) >> 1)
	if id == 0 {
		id = 1
	}
	return id
}

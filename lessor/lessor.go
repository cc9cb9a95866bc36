package lessor

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/checkpoint"
	"github.com/corenode/corenode/lease"
)

// Proposer replicates lease grants and revokes: from any member, through
// raft (forwarded to the leader when this member does not lead), returning
// the answer of the entry as it applied. The request layer's write
// pipeline implements it (server.LeaseProposer).
type Proposer interface {
	ProposeGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error)
	ProposeRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error)
}

// State is what the lessor reads of the replicated state (fsm.FSM): the
// leases applied and the keys attached to each. Safe for concurrent use.
type State interface {
	Lease(id int64) (lease.Lease, bool)
	Leases() []lease.Lease
	LeaseKeys(id int64) [][]byte
}

// Barrier returns once this member's state includes every write
// acknowledged before the call began and a quorum confirmed, after the
// call began, that this member leads (node.Node.ReadBarrier); it fails on
// a member that does not lead.
type Barrier func(ctx context.Context) error

// Config is what a Lessor is built from; member wires it.
type Config struct {
	// Tracker is the leader's lease clock, and Scheduler proposes its
	// checkpoints and expirations. Both answer only while this member
	// leads.
	Tracker   *lease.Tracker
	Scheduler *checkpoint.Scheduler
	State     State
	Barrier   Barrier
	Proposer  Proposer
	// MinTTL is the smallest TTL granted, in seconds: smaller requests are
	// raised to it, as etcd does, because a lease shorter than an election
	// could expire during one.
	MinTTL int64
	// Metrics registers the Lease API's counters when not nil.
	Metrics prometheus.Registerer
}

// clock is the part of lease.Tracker the lessor uses.
type clock interface {
	Renew(id int64) lease.Renewal
	Remaining(id int64) (remaining, granted int64, ok bool)
}

// settler is the part of checkpoint.Scheduler the lessor uses.
type settler interface {
	AwaitCheckpoint(ctx context.Context, seq uint64) (bool, error)
	AwaitExpiry(ctx context.Context, id int64) (bool, error)
}

// Lessor applies the lease rules. Its methods may be called concurrently.
type Lessor struct {
	clock    clock
	sched    settler
	state    State
	barrier  Barrier
	proposer Proposer
	minTTL   int64
	m        *metrics
	newID    func() int64
}

// New returns a Lessor over cfg's collaborators, none of which may be nil.
func New(cfg Config) *Lessor {
	return &Lessor{clock: cfg.Tracker, sched: cfg.Scheduler, state: cfg.State, barrier: cfg.Barrier,
		proposer: cfg.Proposer, minTTL: cfg.MinTTL, m: newMetrics(cfg.Metrics), newID: randomID}
}

// idAttempts bounds the retries of a grant whose chosen ID was taken.
const idAttempts = 4

// Grant grants the lease r asks for, from any member, and returns the
// applied grant's answer. A TTL past lease.MaxTTL is refused; a smaller
// one than the minimum is raised to it. Without an ID in r, one is chosen
// here, before proposing, so applying the grant stays deterministic; a
// collision is caught when it applies and the grant is proposed again with
// another ID.
func (l *Lessor) Grant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if r.TTL > lease.MaxTTL {
		return nil, ErrTTLTooLarge
	}
	ttl := max(r.TTL, l.minTTL)
	for attempt := 1; ; attempt++ {
		req := &pb.LeaseGrantRequest{ID: r.ID, TTL: ttl}
		if r.ID == 0 {
			req.ID = l.newID()
		}
		resp, err := l.proposer.ProposeGrant(ctx, req)
		if r.ID == 0 && taken(err) && attempt < idAttempts {
			continue
		}
		if err == nil {
			l.m.grants.Inc()
		}
		return resp, err
	}
}

// taken reports whether a grant failed because its ID exists (the request
// layer returns the lease table's error also when the leader answered a
// forwarded grant).
func taken(err error) bool { return errors.Is(err, lease.ErrLeaseExists) }

// Revoke revokes lease r.ID, from any member, and returns the applied
// revoke's answer (the lease's keys are deleted in the same entry).
func (l *Lessor) Revoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	resp, err := l.proposer.ProposeRevoke(ctx, r)
	if err != nil {
		return nil, err
	}
	l.m.revokes.Inc()
	return resp, nil
}

// TimeToLive answers r on the leader, from its lease clock, after a read
// barrier: TTL -1 for a lease that does not exist (etcd's answer), and
// ErrNotLeader while the clock has not taken over a lease that exists (a
// new leader promoting its tracker).
func (l *Lessor) TimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := l.barrier(ctx); err != nil {
		return nil, err
	}
	remaining, granted, ok := l.clock.Remaining(r.ID)
	if !ok {
		if _, exists := l.state.Lease(r.ID); !exists {
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

// Leases lists the leases applied on this member, by ID. It is as fresh as
// this member's state: the caller makes the read linearizable first (a
// read index from the leader, which any member can ask for).
func (l *Lessor) Leases(_ context.Context, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	resp := &pb.LeaseLeasesResponse{}
	for _, le := range l.state.Leases() {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: le.ID})
	}
	return resp, nil
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

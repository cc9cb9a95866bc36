package lessor

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Renew is a keep-alive on the leader: it answers the TTL the holder may
// rely on from when it sent r (zero: the lease is gone), without a header.
// On a member that does not lead it returns ErrNotLeader (or the
// barrier's error), and the caller relays the keep-alive to the leader.
//
// The rules of package lease, in the order they apply:
//
//   - Rule 2: a quorum confirms this member's leadership after r arrived
//     and before the deadline moves (the barrier, which concurrent
//     keep-alives share), so a deposed leader never acknowledges a
//     keep-alive that the next leader would not honour. If leadership is
//     lost between the confirmation and the renewal, the answer is
//     ErrNotLeader: the next leader decides, and the holder must not hear
//     "gone" from this one.
//   - A lease whose time is up is not renewed, and its zero answer waits
//     until its expiry applies: as etcd's lessor does, the holder hears
//     "gone" only once the lease is gone from the state everyone reads, so
//     nothing it reads afterwards shows the lease still there. Leadership
//     lost before then is ErrNotLeader.
//   - Rule 1: a lease checkpointed since its last keep-alive is reset in a
//     committed checkpoint entry before the answer, or the next leader
//     could restart it from the stale checkpoint; if that entry fails, the
//     answer is ErrNotLeader.
func (l *Lessor) Renew(ctx context.Context, r *pb.LeaseKeepAliveRequest) (*pb.LeaseKeepAliveResponse, error) {
	ttl, err := l.renew(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	return &pb.LeaseKeepAliveResponse{ID: r.ID, TTL: ttl}, nil
}

func (l *Lessor) renew(ctx context.Context, id int64) (int64, error) {
	if err := l.barrier(ctx); err != nil {
		return 0, err
	}
	r := l.clock.Renew(id)
	if r.Inactive {
		return 0, ErrNotLeader
	}
	l.m.keepAlives.Inc()
	if r.Due {
		expired, err := l.sched.AwaitExpiry(ctx, id)
		if err != nil {
			return 0, err
		}
		if !expired {
			return 0, ErrNotLeader
		}
		return 0, nil
	}
	if r.ResetSeq == 0 {
		return r.TTL, nil
	}
	committed, err := l.sched.AwaitCheckpoint(ctx, r.ResetSeq)
	if err != nil {
		return 0, err
	}
	if !committed {
		return 0, ErrNotLeader
	}
	return r.TTL, nil
}

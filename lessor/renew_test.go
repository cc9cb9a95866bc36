package lessor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/checkpoint"
	"github.com/corenode/corenode/lease"
)

// Renew applies the keep-alive rules of package lease in order: leadership
// confirmed first; a lease whose time is up answered "gone" only once its
// expiry applied; a checkpointed lease's TTL only once its reset
// committed; and "not the leader" whenever leadership went in between.
func TestRenewRules(t *testing.T) {
	noQuorum := errors.New("no quorum")
	for _, tc := range []struct {
		name       string
		barrier    error
		renewal    lease.Renewal
		settled    bool
		settleErr  error
		wantTTL    int64
		wantErr    error
		wantReset  []uint64 // AwaitCheckpoint calls
		wantExpiry []int64  // AwaitExpiry calls
		counted    bool     // a keep-alive handled as leader
	}{
		{name: "renewed", renewal: lease.Renewal{TTL: 10}, wantTTL: 10, counted: true},
		{name: "gone", renewal: lease.Renewal{}, wantTTL: 0, counted: true},
		{name: "leadership not confirmed", barrier: noQuorum, wantErr: noQuorum},
		{name: "demoted after the barrier", renewal: lease.Renewal{Inactive: true}, wantErr: ErrNotLeader},
		{name: "due, expiry applied", renewal: lease.Renewal{Due: true}, settled: true, wantTTL: 0,
			wantExpiry: []int64{9}, counted: true},
		{name: "due, leadership lost first", renewal: lease.Renewal{Due: true}, settled: false, wantErr: ErrNotLeader,
			wantExpiry: []int64{9}, counted: true},
		{name: "due, caller gave up", renewal: lease.Renewal{Due: true}, settleErr: context.Canceled, wantErr: context.Canceled,
			wantExpiry: []int64{9}, counted: true},
		{name: "reset committed", renewal: lease.Renewal{TTL: 10, ResetSeq: 4}, settled: true, wantTTL: 10,
			wantReset: []uint64{4}, counted: true},
		{name: "reset failed", renewal: lease.Renewal{TTL: 10, ResetSeq: 4}, settled: false, wantErr: ErrNotLeader,
			wantReset: []uint64{4}, counted: true},
		{name: "reset, caller gave up", renewal: lease.Renewal{TTL: 10, ResetSeq: 4}, settleErr: context.DeadlineExceeded,
			wantErr: context.DeadlineExceeded, wantReset: []uint64{4}, counted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLessor(t)
			l.barrier = func(context.Context) error { return tc.barrier }
			l.clock.renewal = tc.renewal
			l.sched.ok, l.sched.err = tc.settled, tc.settleErr
			resp, err := l.Renew(context.Background(), &pb.LeaseKeepAliveRequest{ID: 9})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err == nil && (resp.ID != 9 || resp.TTL != tc.wantTTL) {
				t.Fatalf("answer %v, want ID 9 TTL %d", resp, tc.wantTTL)
			}
			if err != nil && resp != nil {
				t.Fatalf("answer %v with error %v", resp, err)
			}
			if renewed := tc.barrier == nil; renewed != slices.Equal(l.clock.renewed, []int64{9}) {
				t.Fatalf("lease clock renewed %v; want a renewal of lease 9 only once leadership is confirmed", l.clock.renewed)
			}
			if !slices.Equal(l.sched.resetSeqs, tc.wantReset) || !slices.Equal(l.sched.expiries, tc.wantExpiry) {
				t.Fatalf("awaited resets %v and expiries %v, want %v and %v", l.sched.resetSeqs, l.sched.expiries, tc.wantReset, tc.wantExpiry)
			}
			want := 0.0
			if tc.counted {
				want = 1
			}
			if got := gathered(t, l.reg, "corenode_lease_keepalives_total"); got != want {
				t.Fatalf("keep-alives counted %v, want %v", got, want)
			}
		})
	}
}

// New wires the real lease clock and scheduler: before the tracker is
// promoted this member decides nothing about leases, and afterwards a
// lease never checkpointed is renewed by its TTL without a reset.
func TestRenewOnTheRealLeaseClock(t *testing.T) {
	tr := lease.NewTracker(lease.SystemClock{}, lease.TrackerConfig{CheckpointAfter: time.Hour})
	sched := checkpoint.New(tr, nil, checkpoint.Config{}, nil, slog.New(slog.DiscardHandler))
	l := New(Config{Tracker: tr, Scheduler: sched, State: fakeState{1: nil}, Barrier: leader, Proposer: &proposals{}, MinTTL: 2})
	ctx := context.Background()
	if _, err := l.Renew(ctx, &pb.LeaseKeepAliveRequest{ID: 1}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("renew before promotion: %v, want ErrNotLeader", err)
	}
	if _, err := l.TimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 1}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("TimeToLive before promotion: %v, want ErrNotLeader", err)
	}
	tr.Promote(0, []lease.Lease{{ID: 1, TTL: 5}})
	if resp, err := l.Renew(ctx, &pb.LeaseKeepAliveRequest{ID: 1}); err != nil || resp.TTL != 5 {
		t.Fatalf("renew on the leader: %v %v, want TTL 5", resp, err)
	}
	if resp, err := l.Renew(ctx, &pb.LeaseKeepAliveRequest{ID: 2}); err != nil || resp.TTL != 0 {
		t.Fatalf("renew of an unknown lease: %v %v, want TTL 0", resp, err)
	}
}

package lessor

import (
	"context"
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/lease"
)

// fakeClock is the leader's lease clock: the renewal it answers, and the
// time left per lease.
type fakeClock struct {
	renewal   lease.Renewal
	renewed   []int64
	remaining map[int64][2]int64
}

func (f *fakeClock) Renew(id int64) lease.Renewal {
	f.renewed = append(f.renewed, id)
	return f.renewal
}

func (f *fakeClock) Remaining(id int64) (int64, int64, bool) {
	r, ok := f.remaining[id]
	return r[0], r[1], ok
}

// fakeSettler answers the scheduler's waits and records what was awaited.
type fakeSettler struct {
	ok        bool
	err       error
	resetSeqs []uint64
	expiries  []int64
}

func (f *fakeSettler) AwaitCheckpoint(_ context.Context, seq uint64) (bool, error) {
	f.resetSeqs = append(f.resetSeqs, seq)
	return f.ok, f.err
}

func (f *fakeSettler) AwaitExpiry(_ context.Context, id int64) (bool, error) {
	f.expiries = append(f.expiries, id)
	return f.ok, f.err
}

// fakeState maps each applied lease to its keys.
type fakeState map[int64][][]byte

func (s fakeState) Lease(id int64) (lease.Lease, bool) {
	_, ok := s[id]
	return lease.Lease{ID: id}, ok
}

func (s fakeState) Leases() []lease.Lease {
	var out []lease.Lease
	for id := range s {
		out = append(out, lease.Lease{ID: id})
	}
	return out
}

func (s fakeState) LeaseKeys(id int64) [][]byte { return s[id] }

func leader(context.Context) error { return nil }

// proposals records what the lessor proposed, answering from a list of
// errors.
type proposals struct {
	grants  []*pb.LeaseGrantRequest
	revokes []*pb.LeaseRevokeRequest
	errs    []error
}

func (p *proposals) next() error {
	if i := len(p.grants) + len(p.revokes) - 1; i < len(p.errs) {
		return p.errs[i]
	}
	return nil
}

func (p *proposals) ProposeGrant(_ context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	p.grants = append(p.grants, r)
	if err := p.next(); err != nil {
		return nil, err
	}
	return &pb.LeaseGrantResponse{ID: r.ID, TTL: r.TTL}, nil
}

func (p *proposals) ProposeRevoke(_ context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	p.revokes = append(p.revokes, r)
	if err := p.next(); err != nil {
		return nil, err
	}
	return &pb.LeaseRevokeResponse{}, nil
}

// testLessor is a lessor over fakes; ids are the IDs it chooses, in turn.
type testLessor struct {
	*Lessor
	clock *fakeClock
	sched *fakeSettler
	state fakeState
	p     *proposals
	reg   *prometheus.Registry
}

func newTestLessor(t *testing.T, ids ...int64) *testLessor {
	t.Helper()
	tl := &testLessor{clock: &fakeClock{}, sched: &fakeSettler{}, state: fakeState{}, p: &proposals{}, reg: prometheus.NewRegistry()}
	tl.Lessor = New(Config{State: tl.state, Barrier: leader, Proposer: tl.p, MinTTL: 2, Metrics: tl.reg})
	tl.Lessor.clock, tl.Lessor.sched = tl.clock, tl.sched
	tl.newID = func() int64 {
		if len(ids) == 0 {
			t.Fatal("the lessor chose more IDs than the test gave")
		}
		id := ids[0]
		ids = ids[1:]
		return id
	}
	return tl
}

func TestGrantTTLBounds(t *testing.T) {
	tests := []struct {
		ttl, want int64
		err       error
	}{
		{ttl: 1, want: 2}, // raised to the minimum
		{ttl: 0, want: 2},
		{ttl: 60, want: 60},
		{ttl: lease.MaxTTL, want: lease.MaxTTL},
		{ttl: lease.MaxTTL + 1, err: ErrTTLTooLarge},
	}
	for _, tt := range tests {
		l := newTestLessor(t, 7)
		resp, err := l.Grant(context.Background(), &pb.LeaseGrantRequest{TTL: tt.ttl})
		if !errors.Is(err, tt.err) {
			t.Fatalf("TTL %d: error %v, want %v", tt.ttl, err, tt.err)
		}
		if tt.err != nil {
			if len(l.p.grants) != 0 {
				t.Fatalf("TTL %d: refused but proposed %v", tt.ttl, l.p.grants)
			}
			continue
		}
		if resp.TTL != tt.want || l.p.grants[0].TTL != tt.want {
			t.Fatalf("TTL %d: granted %d, proposed %d, want %d", tt.ttl, resp.TTL, l.p.grants[0].TTL, tt.want)
		}
	}
}

// A chosen ID that is taken is replaced and proposed again, a bounded
// number of times; an ID the client chose is never replaced.
func TestGrantRetriesACollisionOfAChosenID(t *testing.T) {
	l := newTestLessor(t, 11, 12, 13)
	l.p.errs = []error{lease.ErrLeaseExists, lease.ErrLeaseExists}
	resp, err := l.Grant(context.Background(), &pb.LeaseGrantRequest{TTL: 10})
	if err != nil || resp.ID != 13 {
		t.Fatalf("grant: %v %v, want ID 13 after two collisions", resp, err)
	}
	if len(l.p.grants) != 3 || l.p.grants[0].ID != 11 || l.p.grants[1].ID != 12 {
		t.Fatalf("proposed %v", l.p.grants)
	}

	l = newTestLessor(t, 1, 2, 3, 4, 5)
	l.p.errs = []error{lease.ErrLeaseExists, lease.ErrLeaseExists, lease.ErrLeaseExists, lease.ErrLeaseExists}
	if _, err := l.Grant(context.Background(), &pb.LeaseGrantRequest{TTL: 10}); !errors.Is(err, lease.ErrLeaseExists) || len(l.p.grants) != idAttempts {
		t.Fatalf("after %d collisions: %v, want ErrLeaseExists after %d", len(l.p.grants), err, idAttempts)
	}

	l = newTestLessor(t)
	l.p.errs = []error{lease.ErrLeaseExists}
	if _, err := l.Grant(context.Background(), &pb.LeaseGrantRequest{ID: 5, TTL: 10}); !errors.Is(err, lease.ErrLeaseExists) || len(l.p.grants) != 1 {
		t.Fatalf("client's ID taken: %v after %d proposals, want ErrLeaseExists after 1", err, len(l.p.grants))
	}
}

// Grants and revokes are counted once each when they succeed, whatever
// retries a grant took; refusals and failures are not counted.
func TestGrantAndRevokeCounters(t *testing.T) {
	l := newTestLessor(t, 1, 2)
	ctx := context.Background()
	l.p.errs = []error{lease.ErrLeaseExists}
	if _, err := l.Grant(ctx, &pb.LeaseGrantRequest{TTL: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grant(ctx, &pb.LeaseGrantRequest{TTL: lease.MaxTTL + 1}); err == nil {
		t.Fatal("granted past MaxTTL")
	}
	if _, err := l.Revoke(ctx, &pb.LeaseRevokeRequest{ID: 2}); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("no quorum")
	l.p.errs = append(l.p.errs, nil, nil, failed)
	if _, err := l.Revoke(ctx, &pb.LeaseRevokeRequest{ID: 3}); !errors.Is(err, failed) {
		t.Fatalf("revoke: %v, want the proposer's error", err)
	}
	if len(l.p.revokes) != 2 || l.p.revokes[0].ID != 2 {
		t.Fatalf("revokes proposed: %v", l.p.revokes)
	}
	for name, want := range map[string]float64{"corenode_lease_grants_total": 1, "corenode_lease_revokes_total": 1, "corenode_lease_keepalives_total": 0} {
		if got := gathered(t, l.reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// gathered is the value of the counter name in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s is not registered", name)
	return 0
}

func TestTimeToLive(t *testing.T) {
	l := newTestLessor(t)
	l.clock.remaining = map[int64][2]int64{1: {7, 10}}
	l.state[1] = [][]byte{[]byte("a"), []byte("b")}
	l.state[2] = nil
	ctx := context.Background()

	resp, err := l.TimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 1, Keys: true})
	if err != nil || resp.TTL != 7 || resp.GrantedTTL != 10 || len(resp.Keys) != 2 {
		t.Fatalf("tracked lease: %v %v", resp, err)
	}
	if resp, _ := l.TimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 1}); len(resp.Keys) != 0 {
		t.Fatalf("keys without asking: %v", resp.Keys)
	}
	if resp, err := l.TimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 3}); err != nil || resp.TTL != -1 {
		t.Fatalf("no such lease: %v %v, want TTL -1", resp, err)
	}
	// Applied but not yet on the clock: a new leader still promoting.
	if _, err := l.TimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 2}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("untracked lease: %v, want ErrNotLeader", err)
	}
	notLeading := errors.New("not leading")
	l.barrier = func(context.Context) error { return notLeading }
	if _, err := l.TimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 1}); !errors.Is(err, notLeading) {
		t.Fatalf("without the barrier: %v", err)
	}
}

func TestLeases(t *testing.T) {
	l := newTestLessor(t)
	if resp, err := l.Leases(context.Background(), &pb.LeaseLeasesRequest{}); err != nil || len(resp.Leases) != 0 {
		t.Fatalf("no leases: %v %v", resp, err)
	}
	l.state[4] = nil
	resp, err := l.Leases(context.Background(), &pb.LeaseLeasesRequest{})
	if err != nil || len(resp.Leases) != 1 || resp.Leases[0].ID != 4 {
		t.Fatalf("one lease: %v %v", resp, err)
	}
}

func TestRandomIDIsPositive(t *testing.T) {
	for range 1000 {
		if id := randomID(); id <= 0 {
			t.Fatalf("id %d", id)
		}
	}
}

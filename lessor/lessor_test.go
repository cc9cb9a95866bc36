package lessor

import (
	"context"
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/lease"
)

type fakeTimer struct {
	remaining map[int64][2]int64
	renewErr  error
}

func (f *fakeTimer) Renew(_ context.Context, id int64) (int64, error) {
	if f.renewErr != nil {
		return 0, f.renewErr
	}
	return f.remaining[id][1], nil
}

func (f *fakeTimer) Remaining(id int64) (int64, int64, bool) {
	r, ok := f.remaining[id]
	return r[0], r[1], ok
}

type fakeState map[int64][][]byte

func (s fakeState) LeaseExists(id int64) bool {
	_, ok := s[id]
	return ok
}
func (s fakeState) LeaseKeys(id int64) [][]byte { return s[id] }

func leader(context.Context) error { return nil }

// grants records what Grant proposed, answering from a list of errors.
type grants struct {
	proposed []*pb.LeaseGrantRequest
	errs     []error
}

func (g *grants) propose(_ context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	g.proposed = append(g.proposed, r)
	if i := len(g.proposed) - 1; i < len(g.errs) && g.errs[i] != nil {
		return nil, g.errs[i]
	}
	return &pb.LeaseGrantResponse{ID: r.ID, TTL: r.TTL}, nil
}

func newTestLessor(ids ...int64) *Lessor {
	l := New(&fakeTimer{}, fakeState{}, leader, 2)
	l.newID = func() int64 { id := ids[0]; ids = ids[1:]; return id }
	return l
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
		g := &grants{}
		resp, err := newTestLessor(7).Grant(context.Background(), &pb.LeaseGrantRequest{TTL: tt.ttl}, g.propose)
		if !errors.Is(err, tt.err) {
			t.Fatalf("TTL %d: error %v, want %v", tt.ttl, err, tt.err)
		}
		if tt.err != nil {
			if len(g.proposed) != 0 {
				t.Fatalf("TTL %d: refused but proposed %v", tt.ttl, g.proposed)
			}
			continue
		}
		if resp.TTL != tt.want || g.proposed[0].TTL != tt.want {
			t.Fatalf("TTL %d: granted %d, proposed %d, want %d", tt.ttl, resp.TTL, g.proposed[0].TTL, tt.want)
		}
	}
}

// A chosen ID that is taken is replaced and proposed again, a bounded
// number of times; an ID the client chose is never replaced.
func TestGrantRetriesACollisionOfAChosenID(t *testing.T) {
	g := &grants{errs: []error{rpctypes.ErrGRPCLeaseExist, rpctypes.ErrGRPCLeaseExist}}
	resp, err := newTestLessor(11, 12, 13).Grant(context.Background(), &pb.LeaseGrantRequest{TTL: 10}, g.propose)
	if err != nil || resp.ID != 13 {
		t.Fatalf("grant: %v %v, want ID 13 after two collisions", resp, err)
	}
	if len(g.proposed) != 3 || g.proposed[0].ID != 11 || g.proposed[1].ID != 12 {
		t.Fatalf("proposed %v", g.proposed)
	}

	g = &grants{errs: []error{rpctypes.ErrGRPCLeaseExist, rpctypes.ErrGRPCLeaseExist, rpctypes.ErrGRPCLeaseExist, rpctypes.ErrGRPCLeaseExist}}
	if _, err := newTestLessor(1, 2, 3, 4, 5).Grant(context.Background(), &pb.LeaseGrantRequest{TTL: 10}, g.propose); !errors.Is(err, rpctypes.ErrGRPCLeaseExist) || len(g.proposed) != idAttempts {
		t.Fatalf("after %d collisions: %v, %d proposals, want ErrGRPCLeaseExist after %d", len(g.proposed), err, len(g.proposed), idAttempts)
	}

	g = &grants{errs: []error{rpctypes.ErrGRPCLeaseExist}}
	if _, err := newTestLessor().Grant(context.Background(), &pb.LeaseGrantRequest{ID: 5, TTL: 10}, g.propose); !errors.Is(err, rpctypes.ErrGRPCLeaseExist) || len(g.proposed) != 1 {
		t.Fatalf("client's ID taken: %v after %d proposals, want ErrGRPCLeaseExist after 1", err, len(g.proposed))
	}
}

func TestTimeToLive(t *testing.T) {
	timer := &fakeTimer{remaining: map[int64][2]int64{1: {7, 10}}}
	state := fakeState{1: {[]byte("a"), []byte("b")}, 2: nil}
	l := New(timer, state, leader, 2)
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
	l = New(timer, state, func(context.Context) error { return notLeading }, 2)
	if _, err := l.TimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 1}); !errors.Is(err, notLeading) {
		t.Fatalf("without the barrier: %v", err)
	}
}

func TestRandomIDIsPositive(t *testing.T) {
	for range 1000 {
		if id := randomID(); id <= 0 {
			t.Fatalf("id %d", id)
		}
	}
}

package readlease

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
)

// next returns what s.Next returns, failing the test if it blocks.
func next(t *testing.T, s *Session) ([]Message, error) {
	t.Helper()
	type result struct {
		msgs []Message
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		msgs, err := s.Next()
		ch <- result{msgs, err}
	}()
	r := await(t, ch, "Next")
	return r.msgs, r.err
}

// A member without a built term refuses a session as not the leader, so
// the edge relays it.
func TestOpenWithoutATermIsNotLeader(t *testing.T) {
	m := New(Config{Duration: dur, Clock: &stepClock{now: time.Unix(1000, 0)}}, &stepNode{f: fsm.New(nil, nil, nil)})
	if s, err := m.Open(context.Background()); !errors.Is(err, ErrNotLeader) || s != nil {
		t.Fatalf("Open without a term: %v, %v; want ErrNotLeader", s, err)
	}
}

// A session answers its Gets through Next, in order: the value with its
// lease, a refusal of an empty key, and the invalidation a write of the
// leased key sends afterwards.
func TestSessionAnswersThenInvalidates(t *testing.T) {
	h := newManagerHarness(t, 2)
	if _, err := h.node.Propose(context.Background(), fsm.OpPut, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	<-h.node.proposals
	s, err := h.m.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	s.Get(ctx, Get{ID: 7, Key: []byte("k"), Hits: 3})
	s.Get(ctx, Get{ID: 8})
	msgs, err := next(t, s)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("Next: %d messages, %v; want the two answers", len(msgs), err)
	}
	a := msgs[0].Answer
	if a == nil || a.ID != 7 || a.Err != nil || a.Lease != dur || a.KV == nil || string(a.KV.Value) != "v" || a.Revision == 0 {
		t.Fatalf("answer to the read of k: %+v; want v with a lease of %v", a, dur)
	}
	if a := msgs[1].Answer; a == nil || a.ID != 8 || !errors.Is(a.Err, ErrEmptyKey) {
		t.Fatalf("answer to a read without a key: %+v; want ErrEmptyKey", a)
	}
	admitted := h.put("k")
	msgs, err = next(t, s)
	if err != nil || len(msgs) != 1 || msgs[0].Invalidate == nil || string(msgs[0].Invalidate.Keys[0]) != "k" {
		t.Fatalf("Next after a write of k: %+v, %v; want its invalidation", msgs, err)
	}
	s.Ack(msgs[0].Invalidate.Seq)
	await(t, admitted, "admit after the holder's answer")
}

// A session whose holder stops reading loses it past MaxQueue: its context
// ends, and Next says so once the queue is drained.
func TestSessionOverflowEndsIt(t *testing.T) {
	h := newManagerHarness(t, 2)
	h.m.cfg.MaxQueue = 1
	s, err := h.m.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Get(context.Background(), Get{ID: 1})
	s.Get(context.Background(), Get{ID: 2})
	select {
	case <-s.Context().Done():
	case <-time.After(hangAfter):
		t.Fatal("the session outlived its queue")
	}
	if msgs, err := next(t, s); err != nil || len(msgs) != 1 || msgs[0].Answer.ID != 1 {
		t.Fatalf("Next: %+v, %v; want the one answer queued", msgs, err)
	}
	if _, err := next(t, s); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after the overflow: %v, want the session's end", err)
	}
}

// Close forgets the holder without releasing its leases: a write of a key
// it held still waits them out. Release, instead, frees them at once.
func TestSessionCloseKeepsLeasesReleaseFreesThem(t *testing.T) {
	h := newManagerHarness(t, 2)
	// Granted off the sweep's schedule, so no other timer shares the
	// lease's deadline.
	h.clock.advance(100 * time.Millisecond)
	ctx := context.Background()
	closed, err := h.m.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	closed.Get(ctx, Get{ID: 1, Key: []byte("a")})
	closed.Close()
	closed.Close() // a second Close does nothing
	// What was queued before Close is still returned, then the end.
	if msgs, err := next(t, closed); err != nil || len(msgs) != 1 || msgs[0].Answer.Lease != dur {
		t.Fatalf("Next after Close: %+v, %v; want the leased answer queued before it", msgs, err)
	}
	if _, err := next(t, closed); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after Close: %v, want the session's end", err)
	}
	admitted := h.put("a")
	h.clock.awaitTimers(t, h.clock.Now().Add(dur), 1)
	select {
	case <-admitted:
		t.Fatal("a closed session's lease was dropped before it ran out")
	default:
	}
	h.clock.advance(dur)
	await(t, admitted, "admit when the closed session's lease ran out")

	released, err := h.m.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer released.Close()
	released.Get(ctx, Get{ID: 2, Key: []byte("b")})
	if msgs, err := next(t, released); err != nil || msgs[0].Answer.Lease != dur {
		t.Fatalf("read of b: %+v, %v; want a lease", msgs, err)
	}
	admitted = h.put("b")
	if msgs, err := next(t, released); err != nil || msgs[0].Invalidate == nil {
		t.Fatalf("Next after a write of b: %+v, %v; want its invalidation", msgs, err)
	}
	released.Release()
	if at := await(t, admitted, "admit after the release"); !at.Equal(h.clock.Now()) {
		t.Fatalf("admitted at %v, want at the release, %v", at, h.clock.Now())
	}
}

// Ended closes when the session's term ends.
func TestSessionEndsWithItsTerm(t *testing.T) {
	h := newManagerHarness(t, 2)
	s, err := h.m.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case <-s.Ended():
		t.Fatal("ended while the term runs")
	default:
	}
	h.stop()
	await(t, s.Ended(), "the end of the term")
}

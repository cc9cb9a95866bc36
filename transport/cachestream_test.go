package transport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/api/cachepb"
	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/lessor"
	"github.com/corenode/corenode/readlease"
	"github.com/corenode/corenode/server"
)

// cacheHangAfter bounds every wait of these tests; a passing test never
// comes near it.
const cacheHangAfter = 10 * time.Second

// leaderNode is a member that leads, applying proposals to a real FSM at
// once.
type leaderNode struct{ f *fsm.FSM }

func (n *leaderNode) ReadBarrier(context.Context) error { return nil }
func (n *leaderNode) FSM() *fsm.FSM                     { return n.f }
func (n *leaderNode) IsLeader() bool                    { return true }
func (n *leaderNode) LeaderChange() <-chan struct{}     { return nil }

func (n *leaderNode) Propose(_ context.Context, op fsm.Op, msg fsm.Message) (any, error) {
	data, err := fsm.Encode(op, msg)
	if err != nil {
		return nil, err
	}
	res := n.f.Apply(&raft.Log{Type: raft.LogCommand, Term: 1, Data: data}).(fsm.Result)
	return res.Resp, res.Err
}

// fakeSessionStream is a client's cache session as the server sees it:
// the test sends on in (closing it is the client's clean end) and reads
// what the server sent from out.
type fakeSessionStream struct {
	grpc.ServerStream
	ctx context.Context
	in  chan *cachepb.SessionRequest
	out chan *cachepb.SessionResponse
}

func newFakeSessionStream(ctx context.Context) *fakeSessionStream {
	return &fakeSessionStream{ctx: ctx, in: make(chan *cachepb.SessionRequest), out: make(chan *cachepb.SessionResponse, 16)}
}

func (f *fakeSessionStream) Context() context.Context { return f.ctx }

func (f *fakeSessionStream) Send(m *cachepb.SessionResponse) error {
	select {
	case f.out <- m:
		return nil
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

func (f *fakeSessionStream) Recv() (*cachepb.SessionRequest, error) {
	select {
	case r, ok := <-f.in:
		if !ok {
			return nil, io.EOF
		}
		return r, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}

func (f *fakeSessionStream) send(t *testing.T, r *cachepb.SessionRequest) {
	t.Helper()
	select {
	case f.in <- r:
	case <-time.After(cacheHangAfter):
		t.Fatal("the session stopped reading")
	}
}

func (f *fakeSessionStream) recv(t *testing.T) *cachepb.SessionResponse {
	t.Helper()
	select {
	case m := <-f.out:
		return m
	case <-time.After(cacheHangAfter):
		t.Fatal("nothing sent")
		return nil
	}
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(cacheHangAfter):
		t.Fatalf("%s: nothing after %v", what, cacheHangAfter)
		panic("unreachable")
	}
}

const cacheLease = 2 * time.Second

// leadingManager returns a read-lease manager whose term is built, and a
// function that ends the term.
func leadingManager(t *testing.T) (*readlease.Manager, *leaderNode, func()) {
	t.Helper()
	n := &leaderNode{f: fsm.New(nil, nil, nil)}
	m := readlease.New(readlease.Config{Duration: cacheLease, Window: time.Minute, HolderWait: time.Second,
		Limits: readlease.Limits{MaxKeys: 10, MaxHoldersPerKey: 10}, Logger: slog.New(slog.DiscardHandler)}, n)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx, 1)
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	// Open fails until Run has built the term.
	deadline := time.Now().Add(cacheHangAfter)
	for {
		s, err := m.Open(context.Background())
		if err == nil {
			s.Close()
			return m, n, stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("the term was never built: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

func serve(m *readlease.Manager, stream *fakeSessionStream) <-chan error {
	done := make(chan error, 1)
	go func() { done <- serveSession(sessions(m), stream) }()
	return done
}

// A member without a term says "not the leader", which the cache service
// reads as "relay the session".
func TestServeSessionWithoutATermIsNotLeader(t *testing.T) {
	m := readlease.New(readlease.Config{Duration: cacheLease}, &leaderNode{f: fsm.New(nil, nil, nil)})
	err := serveSession(sessions(m), newFakeSessionStream(context.Background()))
	if !errors.Is(err, lessor.ErrNotLeader) || !notLeader(err) {
		t.Fatalf("serve without a term: %v, want the one not-leader error", err)
	}
}

// On the wire: a read answered with its value and lease, a read without a
// key refused as etcd refuses it, an invalidation when the key is written,
// the write let through by the ack, and a clean end by the client.
func TestServeSessionOnTheWire(t *testing.T) {
	m, n, _ := leadingManager(t)
	if _, err := n.Propose(context.Background(), fsm.OpPut, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	stream := newFakeSessionStream(context.Background())
	done := serve(m, stream)

	stream.send(t, &cachepb.SessionRequest{Msg: &cachepb.SessionRequest_Get{Get: &cachepb.GetRequest{Id: 1, Key: []byte("k")}}})
	g := stream.recv(t).GetGet()
	if g == nil || g.Id != 1 || g.Code != 0 || g.Kv == nil || string(g.Kv.Key) != "k" || string(g.Kv.Value) != "v" ||
		g.Kv.ModRevision != g.Revision || g.LeaseMs != cacheLease.Milliseconds() {
		t.Fatalf("answer to the read of k: %v; want v, its revision, and a lease of %v", g, cacheLease)
	}

	stream.send(t, &cachepb.SessionRequest{Msg: &cachepb.SessionRequest_Get{Get: &cachepb.GetRequest{Id: 2}}})
	want := status.Convert(rpctypes.ErrGRPCEmptyKey)
	if g := stream.recv(t).GetGet(); g == nil || g.Id != 2 || codes.Code(g.Code) != codes.InvalidArgument || g.Message != want.Message() {
		t.Fatalf("answer to a read without a key: %v; want %v", g, want)
	}

	cmd := fsm.Command{Op: fsm.OpPut, Msg: &pb.PutRequest{Key: []byte("k"), Value: []byte("w")}}
	admitted := make(chan error, 1)
	go func() {
		release, err := m.Admit(context.Background(), cmd)
		if err == nil {
			release()
		}
		admitted <- err
	}()
	inv := stream.recv(t).GetInvalidate()
	if inv == nil || len(inv.Keys) != 1 || string(inv.Keys[0]) != "k" {
		t.Fatalf("after a write of k: %v, want its invalidation", inv)
	}
	select {
	case err := <-admitted:
		t.Fatalf("the write went ahead before the holder answered: %v", err)
	default:
	}
	stream.send(t, &cachepb.SessionRequest{Msg: &cachepb.SessionRequest_Ack{Ack: &cachepb.InvalidateAck{Seq: inv.Seq}}})
	if err := wait(t, admitted, "the write after the ack"); err != nil {
		t.Fatal(err)
	}

	close(stream.in)
	if err := wait(t, done, "the end of the session"); err != nil {
		t.Fatalf("a clean end: %v", err)
	}
}

// A session ends when the leader's term does, as "leader changed".
func TestServeSessionEndsWithTheTerm(t *testing.T) {
	m, _, stop := leadingManager(t)
	stream := newFakeSessionStream(context.Background())
	done := serve(m, stream)
	// Answered: the session is open.
	stream.send(t, &cachepb.SessionRequest{Msg: &cachepb.SessionRequest_Get{Get: &cachepb.GetRequest{Id: 1, Key: []byte("k")}}})
	if g := stream.recv(t).GetGet(); g == nil || g.Code != 0 || g.Kv != nil {
		t.Fatalf("answer to a read of a missing key: %v", g)
	}
	stop()
	if err := wait(t, done, "the end of the session"); !errors.Is(err, readlease.ErrLeaderChanged) {
		t.Fatalf("session at the end of the term: %v, want ErrLeaderChanged", err)
	}
}

// A session whose context ended stops sending with Unavailable, which
// sends the client to open a new one.
func TestSendSessionEndsUnavailable(t *testing.T) {
	m, _, _ := leadingManager(t)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := m.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cancel()
	err = sendSession(s, newFakeSessionStream(context.Background()))
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "read-lease session ended: context canceled" {
		t.Fatalf("send after the session ended: %v", err)
	}
}

// A failed read is answered with the code its error calls for.
func TestGetStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{readlease.ErrEmptyKey, codes.InvalidArgument, "etcdserver: key is not provided"},
		{lessor.ErrNotLeader, codes.Unavailable, lessor.ErrNotLeader.Error()},
		{readlease.ErrLeaderChanged, codes.Unavailable, readlease.ErrLeaderChanged.Error()},
		{context.Canceled, codes.Canceled, "context canceled"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "context deadline exceeded"},
		{rpctypes.ErrGRPCNoSpace, codes.ResourceExhausted, "etcdserver: mvcc: database space exceeded"},
	} {
		if st := getStatus(tc.err); st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("getStatus(%v) = %v %q, want %v %q", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
}

// sessions is a request layer that serves only m's read-lease sessions.
func sessions(m *readlease.Manager) *server.Server {
	s := server.New(nil, nil, nil, server.Config{})
	s.SetReadLeases(m)
	return s
}

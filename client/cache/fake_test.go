package cache

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/corenode/corenode/api/cachepb"
)

// wait bounds every wait for an asynchronous delivery; it only matters
// when a test fails.
const wait = 5 * time.Second

// fakeClock moves only when the test moves it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t, which must not be before now.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.now) {
		panic("fakeClock: moved backwards")
	}
	c.now = t
}

// fakeServer is a scripted leader: each session is handed to the test,
// which reads the client's requests and sends what it likes.
type fakeServer struct {
	cachepb.UnimplementedCacheServer
	sessions chan *fakeSession
}

// fakeSession is one Session stream on the server's side. Only the test
// goroutine sends on it, and only until end is used.
type fakeSession struct {
	stream cachepb.Cache_SessionServer
	reqs   chan *cachepb.SessionRequest // closed when the client's side ends
	end    chan error
	// released is closed when the client ended its side cleanly, which the
	// leader takes as the release of every lease; the session then ends
	// as the leader's does.
	released chan struct{}
}

func (f *fakeServer) Session(stream cachepb.Cache_SessionServer) error {
	s := &fakeSession{
		stream:   stream,
		reqs:     make(chan *cachepb.SessionRequest, 64),
		end:      make(chan error, 1),
		released: make(chan struct{}),
	}
	ctx := stream.Context()
	go func() {
		defer close(s.reqs)
		for {
			r, err := stream.Recv()
			if err == io.EOF {
				close(s.released)
				return
			}
			if err != nil {
				return
			}
			select {
			case s.reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	select {
	case f.sessions <- s:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-s.end:
		return err
	case <-s.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next returns the next session the client opens.
func (f *fakeServer) next(t *testing.T) *fakeSession {
	t.Helper()
	select {
	case s := <-f.sessions:
		return s
	case <-time.After(wait):
		t.Fatal("no session opened")
		return nil
	}
}

func (s *fakeSession) recv(t *testing.T) *cachepb.SessionRequest {
	t.Helper()
	select {
	case r, ok := <-s.reqs:
		if !ok {
			t.Fatal("session ended while waiting for a request")
		}
		return r
	case <-time.After(wait):
		t.Fatal("no request arrived")
		return nil
	}
}

// get returns the next request, which must be a GetRequest for key.
func (s *fakeSession) get(t *testing.T, key string) *cachepb.GetRequest {
	t.Helper()
	r := s.recv(t).GetGet()
	if r == nil {
		t.Fatalf("got an ack, want a GetRequest for %q", key)
	}
	if string(r.Key) != key {
		t.Fatalf("GetRequest for %q, want %q", r.Key, key)
	}
	return r
}

// ack returns the next request, which must be an InvalidateAck.
func (s *fakeSession) ack(t *testing.T) uint64 {
	t.Helper()
	r := s.recv(t)
	a := r.GetAck()
	if a == nil {
		t.Fatalf("got %v, want an InvalidateAck", r)
	}
	return a.Seq
}

func (s *fakeSession) send(t *testing.T, m *cachepb.SessionResponse) {
	t.Helper()
	if err := s.stream.Send(m); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// reply answers request id with value (nil: no such key) and a lease.
func (s *fakeSession) reply(t *testing.T, id uint64, key string, value *string, leaseMs int64) {
	t.Helper()
	var kv *cachepb.KeyValue
	if value != nil {
		kv = &cachepb.KeyValue{Key: []byte(key), Value: []byte(*value), ModRevision: 7, CreateRevision: 5, Version: 2}
	}
	s.send(t, &cachepb.SessionResponse{Msg: &cachepb.SessionResponse_Get{
		Get: &cachepb.GetResponse{Id: id, Kv: kv, Revision: 9, LeaseMs: leaseMs},
	}})
}

func (s *fakeSession) invalidate(t *testing.T, seq uint64, keys ...string) {
	t.Helper()
	inv := &cachepb.Invalidate{Seq: seq}
	for _, k := range keys {
		inv.Keys = append(inv.Keys, []byte(k))
	}
	s.send(t, &cachepb.SessionResponse{Msg: &cachepb.SessionResponse_Invalidate{Invalidate: inv}})
}

// barrier returns once the client has handled everything sent before it:
// the client handles messages in order and acknowledges an Invalidate only
// after handling it. It expects no other request in between.
func (s *fakeSession) barrier(t *testing.T, seq uint64) {
	t.Helper()
	s.invalidate(t, seq)
	if got := s.ack(t); got != seq {
		t.Fatalf("ack %d, want %d", got, seq)
	}
}

// harness is a Cache connected to a fakeServer over an in-process
// listener, on a fake clock.
type harness struct {
	c   *Cache
	srv *fakeServer
	clk *fakeClock

	waitMu  sync.Mutex
	waiting chan string // from watchWaits: the key of each Get that starts waiting
}

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	h := &harness{
		srv: &fakeServer{sessions: make(chan *fakeSession, 4)},
		clk: newFakeClock(),
	}
	gs := grpc.NewServer()
	cachepb.RegisterCacheServer(gs, h.srv)
	h.c = dialCache(t, gs, append([]Option{WithClock(h.clk), withWaitHook(h.waited)}, opts...)...)
	return h
}

func (h *harness) waited(key string) {
	h.waitMu.Lock()
	ch := h.waiting
	h.waitMu.Unlock()
	if ch != nil {
		ch <- key
	}
}

// watchWaits makes waitingFor see the Gets that start waiting from now on.
func (h *harness) watchWaits() {
	h.waitMu.Lock()
	defer h.waitMu.Unlock()
	h.waiting = make(chan string, 64)
}

// dialCache serves gs on an in-process listener and returns a Cache that
// reads through it.
func dialCache(t *testing.T, gs *grpc.Server, opts ...Option) *Cache {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(cachepb.NewCacheClient(conn), cfg)
	t.Cleanup(func() {
		c.Close()
		conn.Close()
		gs.Stop()
	})
	return c
}

// waitingFor returns once a Get of key has started waiting for the leader.
func (h *harness) waitingFor(t *testing.T, key string) {
	t.Helper()
	h.waitMu.Lock()
	ch := h.waiting
	h.waitMu.Unlock()
	if ch == nil {
		t.Fatal("waitingFor without watchWaits")
	}
	select {
	case k := <-ch:
		if k != key {
			t.Fatalf("a Get of %q is waiting, want %q", k, key)
		}
	case <-time.After(wait):
		t.Fatalf("no Get of %q started waiting", key)
	}
}

type result struct {
	v   *string // nil: no such key
	err error
}

// goGet runs Get in its own goroutine.
func (h *harness) goGet(ctx context.Context, key string) <-chan result {
	out := make(chan result, 1)
	go func() {
		kv, err := h.c.Get(ctx, key)
		var r result
		r.err = err
		if kv != nil {
			v := string(kv.Value)
			r.v = &v
		}
		out <- r
	}()
	return out
}

func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(wait):
		t.Fatal("Get did not return")
		return result{}
	}
}

// mustValue asserts r carries value want (nil: no such key).
func mustValue(t *testing.T, r result, want *string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("Get: %v", r.err)
	}
	switch {
	case want == nil && r.v != nil:
		t.Fatalf("Get = %q, want no key", *r.v)
	case want != nil && r.v == nil:
		t.Fatalf("Get = no key, want %q", *want)
	case want != nil && *r.v != *want:
		t.Fatalf("Get = %q, want %q", *r.v, *want)
	}
}

func str(s string) *string { return &s }

// hit calls Get, which must answer from memory with want.
func (h *harness) hit(t *testing.T, key string, want *string) {
	t.Helper()
	before := h.c.Stats().Hits
	// A hit returns at once; a miss would wait for an answer that the
	// test does not send.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	kv, err := h.c.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	r := result{}
	if kv != nil {
		r.v = str(string(kv.Value))
	}
	mustValue(t, r, want)
	if got := h.c.Stats().Hits; got != before+1 {
		t.Fatalf("Get(%q) was not a hit", key)
	}
}

// open runs the cache's first Get, of a, which opens its session, and
// answers it on that session with a = 1 under a 1 s lease.
func (h *harness) open(t *testing.T) *fakeSession {
	t.Helper()
	ch := h.goGet(context.Background(), "a")
	s := h.srv.next(t)
	s.reply(t, s.get(t, "a").Id, "a", str("1"), lease1s)
	mustValue(t, await(t, ch), str("1"))
	return s
}

// fill makes the cache hold key = value under a lease: it runs a Get, and
// answers it on s.
func (h *harness) fill(t *testing.T, s *fakeSession, key string, value *string, leaseMs int64) {
	t.Helper()
	ch := h.goGet(context.Background(), key)
	req := s.get(t, key)
	s.reply(t, req.Id, key, value, leaseMs)
	mustValue(t, await(t, ch), value)
}

package cache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/api/cachepb"
)

var bg = context.Background()

// The default margin of a 1 s lease is 10 ms + 50 ms.
const (
	lease1s    = 1000 // lease_ms
	deadline1s = 940 * time.Millisecond
)

// An entry is served until exactly sendTime + lease - margin, measured from
// when the request was sent, not from when the answer arrived.
func TestHitUntilDeadline(t *testing.T) {
	h := newHarness(t)
	t0 := h.clk.Now()

	ch := h.goGet(bg, "a")
	s := h.srv.next(t)
	req := s.get(t, "a")
	if req.Id != 1 {
		t.Fatalf("first request has id %d, want 1", req.Id)
	}
	h.clk.Advance(300 * time.Millisecond) // the answer takes its time
	s.reply(t, req.Id, "a", str("1"), lease1s)
	mustValue(t, await(t, ch), str("1"))

	h.hit(t, "a", str("1"))
	h.clk.Set(t0.Add(deadline1s - time.Nanosecond))
	h.hit(t, "a", str("1"))

	h.clk.Set(t0.Add(deadline1s))
	ch = h.goGet(bg, "a")
	// Request ids are sequential: the hits sent nothing, and they ride on
	// the next request for the leader's metrics.
	if req := s.get(t, "a"); req.Id != 2 || req.Hits != 2 {
		t.Fatalf("second request has id %d and reports %d hits, want 2 and 2", req.Id, req.Hits)
	} else {
		s.reply(t, req.Id, "a", str("2"), lease1s)
	}
	mustValue(t, await(t, ch), str("2"))

	st := h.c.Stats()
	if st.Hits != 2 || st.Misses != 2 || st.Uncached != 0 || st.Keys != 1 {
		t.Fatalf("stats %+v, want 2 hits, 2 misses, 0 uncached, 1 key", st)
	}
}

func TestDriftMarginOption(t *testing.T) {
	h := newHarness(t, WithDriftMargin(200*time.Millisecond))
	t0 := h.clk.Now()
	s := h.open(t)

	h.clk.Set(t0.Add(800*time.Millisecond - time.Nanosecond))
	h.hit(t, "a", str("1"))
	h.clk.Set(t0.Add(800 * time.Millisecond))
	ch := h.goGet(bg, "a")
	s.reply(t, s.get(t, "a").Id, "a", str("1"), lease1s)
	mustValue(t, await(t, ch), str("1"))
}

// A margin as long as the lease caches nothing.
func TestMarginAsLongAsLease(t *testing.T) {
	h := newHarness(t, WithDriftMargin(time.Second))
	h.open(t)
	if st := h.c.Stats(); st.Keys != 0 || st.Uncached != 1 {
		t.Fatalf("stats %+v, want nothing cached", st)
	}
}

func TestNoLeaseNotCached(t *testing.T) {
	h := newHarness(t)
	ch := h.goGet(bg, "a")
	s := h.srv.next(t)
	for i := range 3 {
		if i > 0 {
			ch = h.goGet(bg, "a")
		}
		s.reply(t, s.get(t, "a").Id, "a", str(fmt.Sprint(i)), 0)
		mustValue(t, await(t, ch), str(fmt.Sprint(i)))
	}
	if st := h.c.Stats(); st.Hits != 0 || st.Misses != 3 || st.Uncached != 3 || st.Keys != 0 {
		t.Fatalf("stats %+v, want 3 uncached misses", st)
	}
}

// A lease that has run out by the time the answer arrives is not kept.
func TestLeaseOverOnArrival(t *testing.T) {
	h := newHarness(t)
	ch := h.goGet(bg, "a")
	s := h.srv.next(t)
	req := s.get(t, "a")
	h.clk.Advance(deadline1s)
	s.reply(t, req.Id, "a", str("1"), lease1s)
	mustValue(t, await(t, ch), str("1"))
	if st := h.c.Stats(); st.Keys != 0 || st.Uncached != 1 {
		t.Fatalf("stats %+v, want nothing cached", st)
	}
}

func TestMissingKeyCached(t *testing.T) {
	h := newHarness(t)
	ch := h.goGet(bg, "nope")
	s := h.srv.next(t)
	s.reply(t, s.get(t, "nope").Id, "nope", nil, lease1s)
	mustValue(t, await(t, ch), nil)
	h.hit(t, "nope", nil)
	if st := h.c.Stats(); st.Keys != 1 {
		t.Fatalf("stats %+v, want the missing key held", st)
	}
}

func TestKeyValueConverted(t *testing.T) {
	h := newHarness(t)
	ch := make(chan error, 1)
	go func() {
		kv, err := h.c.Get(bg, "a")
		if err == nil && (string(kv.Key) != "a" || string(kv.Value) != "1" || kv.CreateRevision != 5 ||
			kv.ModRevision != 7 || kv.Version != 2 || kv.Lease != 0) {
			err = fmt.Errorf("got %v", kv)
		}
		ch <- err
	}()
	s := h.srv.next(t)
	s.reply(t, s.get(t, "a").Id, "a", str("1"), lease1s)
	select {
	case err := <-ch:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Get did not return")
	}
}

// An Invalidate drops the keys before it is acknowledged: a Get that starts
// after the acknowledgement reached the leader asks the leader.
func TestInvalidate(t *testing.T) {
	h := newHarness(t)
	s := h.open(t)
	h.fill(t, s, "b", str("2"), lease1s)

	s.invalidate(t, 5, "a", "not-held")
	if seq := s.ack(t); seq != 5 {
		t.Fatalf("ack %d, want 5", seq)
	}
	ch := h.goGet(bg, "a")
	s.reply(t, s.get(t, "a").Id, "a", str("1b"), lease1s)
	mustValue(t, await(t, ch), str("1b"))
	h.hit(t, "b", str("2"))

	if st := h.c.Stats(); st.Invalidations != 2 {
		t.Fatalf("stats %+v, want 2 invalidations", st)
	}
}

// An answer that grants a lease, followed at once by an Invalidate that
// takes it back, leaves nothing cached once the Invalidate is acknowledged,
// however the waiting Get is scheduled.
func TestAnswerThenInvalidate(t *testing.T) {
	h := newHarness(t)
	ch := h.goGet(bg, "k0")
	s := h.srv.next(t)
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		if i > 0 {
			ch = h.goGet(bg, key)
		}
		req := s.get(t, key)
		s.reply(t, req.Id, key, str("old"), lease1s)
		s.invalidate(t, uint64(i+1), key)
		if seq := s.ack(t); seq != uint64(i+1) {
			t.Fatalf("ack %d, want %d", seq, i+1)
		}
		mustValue(t, await(t, ch), str("old"))

		ch = h.goGet(bg, key)
		s.reply(t, s.get(t, key).Id, key, str("new"), 0)
		mustValue(t, await(t, ch), str("new"))
	}
	if st := h.c.Stats(); st.Hits != 0 || st.Keys != 0 {
		t.Fatalf("stats %+v, want no hits and nothing held", st)
	}
}

// A request in flight when the session breaks is sent again on the next
// session, with a new send time; entries with time left are still served.
func TestSessionBreak(t *testing.T) {
	h := newHarness(t)
	t0 := h.clk.Now()
	s1 := h.open(t)

	ch := h.goGet(bg, "b")
	req := s1.get(t, "b")
	h.clk.Advance(100 * time.Millisecond)
	s1.end <- status.Error(codes.Unavailable, "leader lost")
	h.hit(t, "a", str("1"))

	s2 := h.srv.next(t)
	if again := s2.get(t, "b"); again.Id != req.Id {
		t.Fatalf("resent request has id %d, want %d", again.Id, req.Id)
	}
	s2.reply(t, req.Id, "b", str("2"), lease1s)
	mustValue(t, await(t, ch), str("2"))
	h.hit(t, "a", str("1"))

	// b's lease counts from the resend, 100 ms after the first send.
	h.clk.Set(t0.Add(100*time.Millisecond + deadline1s - time.Nanosecond))
	h.hit(t, "b", str("2"))
	h.clk.Set(t0.Add(100*time.Millisecond + deadline1s))
	ch = h.goGet(bg, "b")
	s2.reply(t, s2.get(t, "b").Id, "b", str("2"), lease1s)
	mustValue(t, await(t, ch), str("2"))

	if st := h.c.Stats(); st.Reconnects != 1 {
		t.Fatalf("stats %+v, want 1 reconnect", st)
	}
}

// A Get whose ctx ends while the session is down is not sent on the next.
func TestAbandonedWhileDown(t *testing.T) {
	h := newHarness(t)
	s1 := h.open(t)

	ctx, cancel := context.WithCancel(bg)
	h.watchWaits()
	ch := h.goGet(ctx, "gone")
	s1.get(t, "gone")
	h.waitingFor(t, "gone")
	s1.end <- status.Error(codes.Unavailable, "leader lost")
	cancel()
	if r := await(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Get = %v, want context.Canceled", r.err)
	}
	s2 := h.srv.next(t)
	ch = h.goGet(bg, "b")
	req := s2.get(t, "b") // not "gone"
	s2.reply(t, req.Id, "b", str("2"), lease1s)
	mustValue(t, await(t, ch), str("2"))
}

func TestErrorCodePassesThrough(t *testing.T) {
	h := newHarness(t)
	ch := h.goGet(bg, "a")
	s := h.srv.next(t)
	req := s.get(t, "a")
	s.send(t, &cachepb.SessionResponse{Msg: &cachepb.SessionResponse_Get{
		Get: &cachepb.GetResponse{Id: req.Id, Code: uint32(codes.PermissionDenied), Message: "not yours", LeaseMs: lease1s},
	}})
	r := await(t, ch)
	if st, ok := status.FromError(r.err); !ok || st.Code() != codes.PermissionDenied || st.Message() != "not yours" {
		t.Fatalf("Get = %v, want PermissionDenied: not yours", r.err)
	}
	ch = h.goGet(bg, "a")
	s.reply(t, s.get(t, "a").Id, "a", str("1"), lease1s)
	mustValue(t, await(t, ch), str("1"))
}

func TestCloseWakesGet(t *testing.T) {
	h := newHarness(t)
	ch := h.goGet(bg, "a")
	s := h.srv.next(t)
	s.get(t, "a")
	if err := h.c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r := await(t, ch); !errors.Is(r.err, ErrClosed) {
		t.Fatalf("blocked Get = %v, want ErrClosed", r.err)
	}
	if _, err := h.c.Get(bg, "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
	if err := h.c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Close ends the session cleanly, after the entries are gone, and waits for
// the leader to end it too: the leader takes that as the release of every
// lease, so writes of the cached keys need not wait them out.
func TestCloseReleasesTheSession(t *testing.T) {
	h := newHarness(t)
	s := h.open(t)
	h.hit(t, "a", str("1"))
	if err := h.c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-s.released:
	default:
		t.Fatal("Close returned and the leader saw no release")
	}
	if _, err := h.c.Get(bg, "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
}

func TestCloseUnused(t *testing.T) {
	h := newHarness(t)
	if err := h.c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := h.c.Get(bg, "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
}

// Concurrent Gets of one key share a request; a leased answer serves all.
func TestSharedRequestLeased(t *testing.T) {
	h := newHarness(t)
	h.watchWaits()
	a := h.goGet(bg, "k")
	s := h.srv.next(t)
	req := s.get(t, "k")
	h.waitingFor(t, "k")
	b := h.goGet(bg, "k")
	h.waitingFor(t, "k")
	s.reply(t, req.Id, "k", str("1"), lease1s)
	mustValue(t, await(t, a), str("1"))
	mustValue(t, await(t, b), str("1"))

	ch := h.goGet(bg, "other")
	if r := s.get(t, "other"); r.Id != 2 {
		t.Fatalf("next request has id %d, want 2: the Gets of k did not share", r.Id)
	} else {
		s.reply(t, r.Id, "other", nil, 0)
	}
	mustValue(t, await(t, ch), nil)
}

// A Get that joined a request already sent cannot use an answer without a
// lease: the leader may have read the value before that Get began, and a
// write may have completed since. It asks again.
func TestSharedRequestUnleased(t *testing.T) {
	h := newHarness(t)
	h.watchWaits()
	a := h.goGet(bg, "k")
	s := h.srv.next(t)
	req := s.get(t, "k")
	h.waitingFor(t, "k")
	b := h.goGet(bg, "k")
	h.waitingFor(t, "k")
	s.reply(t, req.Id, "k", str("old"), 0)
	mustValue(t, await(t, a), str("old"))

	again := s.get(t, "k")
	s.reply(t, again.Id, "k", str("new"), 0)
	mustValue(t, await(t, b), str("new"))
	if st := h.c.Stats(); st.Misses != 2 {
		t.Fatalf("stats %+v, want 2 misses", st)
	}
}

// A leased answer to a Get that gave up is stored: the lease is as good as
// any.
func TestAbandonedAnswerStored(t *testing.T) {
	h := newHarness(t)
	h.watchWaits()
	ctx, cancel := context.WithCancel(bg)
	ch := h.goGet(ctx, "a")
	s := h.srv.next(t)
	req := s.get(t, "a")
	h.waitingFor(t, "a")
	cancel()
	if r := await(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Get = %v, want context.Canceled", r.err)
	}
	s.reply(t, req.Id, "a", str("1"), lease1s)
	s.barrier(t, 1)
	h.hit(t, "a", str("1"))
}

func TestMaxKeys(t *testing.T) {
	h := newHarness(t, WithMaxKeys(2))
	s := h.open(t)
	h.fill(t, s, "b", str("2"), lease1s)
	h.hit(t, "a", str("1")) // b is now the least recently used
	h.fill(t, s, "c", str("3"), lease1s)

	h.hit(t, "a", str("1"))
	h.hit(t, "c", str("3"))
	h.fill(t, s, "b", str("2"), lease1s) // a miss: evicted
	if st := h.c.Stats(); st.Evictions != 2 || st.Keys != 2 {
		t.Fatalf("stats %+v, want 2 evictions, 2 keys", st)
	}
}

// A member that does not serve read leases fails Gets at once.
func TestUnimplemented(t *testing.T) {
	c := dialCache(t, grpc.NewServer())
	ctx, cancel := context.WithTimeout(bg, wait)
	defer cancel()
	_, err := c.Get(ctx, "a")
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("Get = %v, want Unimplemented", err)
	}
}

// A Get that times out while no session can be opened says why.
func TestTimeoutNamesSessionError(t *testing.T) {
	conn, err := grpc.NewClient("passthrough:///nowhere",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
			return nil, errors.New("no route to leader")
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(cachepb.NewCacheClient(conn), cfg)
	defer c.Close()
	// The first attempt to open a session fails asynchronously; retry
	// until it has (a bounded wait).
	end := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
		_, err := c.Get(ctx, "a")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get = %v, want DeadlineExceeded", err)
		}
		if strings.Contains(err.Error(), "no route to leader") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("Get = %v, want the session's error named", err)
		}
	}
}

func TestOptionsValidated(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithMaxKeys(0)}, "max keys"},
		{[]Option{WithMaxKeys(-1)}, "max keys"},
		{[]Option{WithDriftMargin(-time.Millisecond)}, "drift margin"},
		{[]Option{WithClock(nil)}, "clock"},
	} {
		if _, err := newConfig(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("newConfig = %v, want an error about %s", err, tc.want)
		}
	}
	cfg, err := newConfig([]Option{WithDriftMargin(0)})
	if err != nil {
		t.Fatalf("zero margin: %v", err)
	}
	if m := cfg.marginFor(time.Second); m != 0 {
		t.Fatalf("margin %v, want 0", m)
	}
	cfg, _ = newConfig(nil)
	if m := cfg.marginFor(2 * time.Second); m != 70*time.Millisecond {
		t.Fatalf("default margin of 2s = %v, want 70ms", m)
	}
}

func TestNew(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	// clientv3.New does not dial eagerly, so no server is needed.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := New(cli, WithMaxKeys(0)); err == nil || !strings.HasPrefix(err.Error(), "cache: ") {
		t.Fatalf("New with bad options = %v, want a cache: error", err)
	}
	c, err := New(cli)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

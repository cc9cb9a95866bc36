package member_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/api/cachepb"
	"github.com/corenode/corenode/client/cache"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// rawSession is a cache session driven by hand: the test decides when, or
// whether, invalidations are answered.
type rawSession struct {
	t      *testing.T
	stream cachepb.Cache_SessionClient
	cancel context.CancelFunc
	msgs   chan *cachepb.SessionResponse
	err    error // why the stream ended; read after msgs is closed
	nextID uint64
}

func openSession(t *testing.T, cli *clientv3.Client) *rawSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := cachepb.NewCacheClient(cli.ActiveConnection()).Session(ctx)
	if err != nil {
		t.Fatalf("open session: %v", err)
	}
	s := &rawSession{t: t, stream: stream, cancel: cancel, msgs: make(chan *cachepb.SessionResponse, 64)}
	go func() {
		defer close(s.msgs)
		for {
			m, err := stream.Recv()
			if err != nil {
				s.err = err
				return
			}
			s.msgs <- m
		}
	}()
	return s
}

// get sends a GetRequest and returns the time it was sent and the answer.
func (s *rawSession) get(key string) (time.Time, *cachepb.GetResponse) {
	s.t.Helper()
	s.nextID++
	sent := time.Now()
	if err := s.stream.Send(&cachepb.SessionRequest{Msg: &cachepb.SessionRequest_Get{Get: &cachepb.GetRequest{Id: s.nextID, Key: []byte(key)}}}); err != nil {
		s.t.Fatalf("send get: %v", err)
	}
	m := s.next()
	g := m.GetGet()
	if g == nil || g.Id != s.nextID {
		s.t.Fatalf("want the answer to get %d, got %v", s.nextID, m)
	}
	return sent, g
}

func (s *rawSession) next() *cachepb.SessionResponse {
	s.t.Helper()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			s.t.Fatal("session ended")
		}
		return m
	case <-time.After(10 * time.Second):
		s.t.Fatal("no message on the session in 10 s")
	}
	return nil
}

func (s *rawSession) ack(seq uint64) {
	s.t.Helper()
	if err := s.stream.Send(&cachepb.SessionRequest{Msg: &cachepb.SessionRequest_Ack{Ack: &cachepb.InvalidateAck{Seq: seq}}}); err != nil {
		s.t.Fatalf("send ack: %v", err)
	}
}

// ended waits for the stream to end, skipping what is still sent, and
// returns why it ended (io.EOF: the leader ended it cleanly).
func (s *rawSession) ended() error {
	s.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-s.msgs:
			if !ok {
				return s.err
			}
		case <-timeout:
			s.t.Fatal("the session did not end in 10 s")
		}
	}
}

// putAsync puts key=value and reports when the put was acknowledged. A put
// refused with "leader changed" was not acknowledged (a busy machine can
// move leadership again while the put waits in a gate), so it is sent again,
// as a client would: what the tests check is when a write is acknowledged.
func putAsync(t *testing.T, cli *clientv3.Client, key, value string) <-chan time.Time {
	done := make(chan time.Time, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for {
			_, err := cli.Put(ctx, key, value)
			if errors.Is(err, rpctypes.ErrLeaderChanged) {
				continue
			}
			if err != nil {
				t.Errorf("put %s: %v", key, err)
			}
			break
		}
		done <- time.Now()
	}()
	return done
}

// A write to a leased key is held until the holder drops it, and the holder
// hears of it over its session, relayed by a follower, before the write is
// acknowledged.
func TestReadLeaseInvalidation(t *testing.T) {
	c := membertest.New(t, 3)
	leader := c.WaitLeader()
	f := follower(c, leader)
	cli := c.Client(leader)
	ctx := context.Background()
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	s := openSession(t, c.Client(f))
	_, g := s.get("k")
	if g.Code != 0 || string(g.Kv.GetValue()) != "v1" || g.LeaseMs != member.DefaultReadLeaseDuration.Milliseconds() {
		t.Fatalf("get: %v", g)
	}
	_, missing := s.get("nothing")
	if missing.Kv != nil || missing.LeaseMs == 0 {
		t.Fatalf("a missing key: %v; want no value, leased", missing)
	}

	done := putAsync(t, cli, "k", "v2")
	inv := s.next().GetInvalidate()
	if inv == nil || len(inv.Keys) != 1 || string(inv.Keys[0]) != "k" {
		t.Fatalf("want an invalidation of k, got %v", inv)
	}
	select {
	case <-done:
		t.Fatal("the put returned before the holder dropped the key")
	default:
	}
	// While the put waits, reads get the value without a lease.
	_, during := s.get("k")
	if during.LeaseMs != 0 || string(during.Kv.GetValue()) != "v1" {
		t.Fatalf("read while the write waits: %v; want v1 without a lease", during)
	}
	s.ack(inv.Seq)
	select {
	case <-done:
	case <-time.After(member.DefaultReadLeaseDuration):
		t.Fatal("the put still waits a lease duration after the holder answered")
	}
	_, after := s.get("k")
	if string(after.Kv.GetValue()) != "v2" || after.LeaseMs == 0 {
		t.Fatalf("after the put: %v; want v2, leased", after)
	}

	// A key attached to a lease goes with the lease: its revoke waits too.
	lg, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "owned", "x", clientv3.WithLease(lg.ID)); err != nil {
		t.Fatal(err)
	}
	if _, g := s.get("owned"); g.LeaseMs == 0 {
		t.Fatalf("get owned: %v", g)
	}
	revoked := make(chan error, 1)
	go func() {
		_, err := cli.Revoke(ctx, lg.ID)
		revoked <- err
	}()
	inv = s.next().GetInvalidate()
	if inv == nil || string(inv.Keys[0]) != "owned" {
		t.Fatalf("want an invalidation of owned, got %v", inv)
	}
	s.ack(inv.Seq)
	if err := <-revoked; err != nil {
		t.Fatal(err)
	}
	if _, g := s.get("owned"); g.Kv != nil {
		t.Fatalf("owned after the revoke: %v", g)
	}
}

// A holder that never answers delays a write until its lease has run out,
// measured from when it asked, and not much longer; and so again for the
// lease it takes after each write (its unanswered lease ran out, so it may
// hold the key again).
func TestReadLeaseSilentHolder(t *testing.T) {
	const lease = 700 * time.Millisecond
	c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.ReadLeaseDuration = lease }))
	leader := c.WaitLeader()
	cli := c.Client(leader)
	s := openSession(t, c.Client(follower(c, leader)))
	for round := range 3 {
		sent, g := s.get("k")
		if g.LeaseMs != lease.Milliseconds() {
			t.Fatalf("round %d: get: %v", round, g)
		}
		done := putAsync(t, cli, "k", fmt.Sprint(round))
		if inv := s.next().GetInvalidate(); inv == nil {
			t.Fatalf("round %d: no invalidation", round)
		}
		at := <-done
		if at.Before(sent.Add(lease)) {
			t.Fatalf("round %d: the put returned %v after the get was sent, inside the %v lease", round, at.Sub(sent), lease)
		}
		// Not a speed check: "the write waits for the lease and not for ever".
		if at.After(sent.Add(lease + 5*time.Second)) {
			t.Fatalf("round %d: the put returned %v after the get was sent; the lease was %v", round, at.Sub(sent), lease)
		}
	}
}

// A new leader holds writes until every lease its predecessor could have
// granted has run out (argument C of package readlease).
func TestReadLeaseNewLeaderWaitsOut(t *testing.T) {
	const lease = 4 * time.Second
	c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.ReadLeaseDuration = lease }))
	leader := c.WaitLeader()
	s := openSession(t, c.Client(leader))
	sent, g := s.get("k")
	if g.LeaseMs != lease.Milliseconds() {
		t.Fatalf("get: %v", g)
	}
	c.Stop(leader)
	var others []int
	for i := range c.Members {
		if i != leader {
			others = append(others, i)
		}
	}
	at := <-putAsync(t, c.Client(others...), "k", "v")
	if at.Before(sent.Add(lease)) {
		t.Fatalf("the new leader's put returned %v after the get was sent, inside the %v lease", at.Sub(sent), lease)
	}

	// Having waited, the new leader records that every earlier lease ran
	// out; nobody granted since, so the next leader change costs writes
	// nothing.
	second := c.WaitLeader()
	membertest.Eventually(t, 10*time.Second, func() bool {
		r := c.Members[second].Node().FSM().ReadLeases()
		return r.GrantTerm != 0 && r.Cleared == r.GrantTerm
	}, "the new leader did not record that the earlier leases ran out")
	third := others[0]
	if third == second {
		third = others[1]
	}
	if err := c.Members[second].Node().TransferLeadership(c.Members[third].ID()); err != nil {
		t.Fatal(err)
	}
	if got := c.WaitLeader(); got != third {
		t.Fatalf("leader %d after the transfer, want %d", got, third)
	}
	began := time.Now()
	at = <-putAsync(t, c.Client(others...), "k", "w")
	// Not a speed check: the wait, had it happened, would be the whole
	// 4 s lease.
	if took := at.Sub(began); took >= lease/2 {
		t.Fatalf("a put after a second leader change took %v: the new leader waited out leases that had run out", took)
	}
}

// A holder that ends its session cleanly, as client/cache's Close does,
// releases its leases: a write of a key it held goes ahead at once, not
// after the lease. One whose stream is cancelled, as a crash or a broken
// connection ends it, does not: writes wait its lease out.
func TestReadLeaseRelease(t *testing.T) {
	const lease = 30 * time.Second
	c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.ReadLeaseDuration = lease }))
	leader := c.WaitLeader()
	cli := c.Client(leader)
	ctx := ctxT(t)
	put := func(key string, within time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		_, err := cli.Put(ctx, key, "v")
		return err
	}

	// client/cache, straight to the leader.
	cc, err := cache.New(cli, cache.WithLogger(membertest.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if st := cc.Stats(); st.Keys != 1 {
		t.Fatalf("stats %+v: want a under a lease", st)
	}
	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := put("a", 10*time.Second); err != nil {
		t.Fatalf("put of a key the closed cache held: %v (the lease is %v)", err, lease)
	}

	// A session through a follower's relay, which passes the clean end on.
	relayed := openSession(t, c.Client(follower(c, leader)))
	if _, g := relayed.get("b"); g.LeaseMs != lease.Milliseconds() {
		t.Fatalf("get b: %v", g)
	}
	if err := relayed.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := relayed.ended(); err != io.EOF {
		t.Fatalf("the relayed session ended with %v, want the leader's clean end", err)
	}
	if err := put("b", 10*time.Second); err != nil {
		t.Fatalf("put of a key the released session held: %v (the lease is %v)", err, lease)
	}

	// A cancelled stream releases nothing.
	cancelled := openSession(t, cli)
	if _, g := cancelled.get("c"); g.LeaseMs != lease.Milliseconds() {
		t.Fatalf("get c: %v", g)
	}
	cancelled.cancel()
	cancelled.ended()
	// The deadline ends the put at the client, or first at the member,
	// which answers "request timed out" as etcd does: either way it waited.
	if err := put("c", 3*time.Second); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, rpctypes.ErrTimeout) {
		t.Fatalf("put of a key a cancelled session held: %v, want it to wait out the %v lease", err, lease)
	}
}

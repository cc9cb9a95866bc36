package cache

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/api/cachepb"
)

// Reconnect backoff: short, since Gets wait for the session, and capped so
// a leader that comes back is found within a second.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

// run keeps a session open from the first miss until Close.
func (c *Cache) run() {
	defer c.wg.Done()
	defer c.leader.close()
	backoff := minBackoff
	for {
		began := time.Now()
		healthy := c.runSession()
		if c.ctx.Err() != nil || c.isClosed() {
			return
		}
		if healthy || time.Since(began) >= maxBackoff {
			backoff = minBackoff
		}
		t := time.NewTimer(backoff)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// runSession opens one session, sends the unanswered requests on it, and
// handles what the leader sends until the stream breaks. It reports
// whether the leader sent anything, which resets the backoff.
func (c *Cache) runSession() (healthy bool) {
	ctx, cancel := context.WithCancel(c.ctx)
	// Cancelling also unblocks a Send stuck on a stream that broke.
	defer cancel()
	stream, err := c.leader.client(ctx, c.client).Session(ctx)
	if err != nil {
		c.mu.Lock()
		c.lastErr = fmt.Errorf("open: %w", err)
		c.mu.Unlock()
		return false
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.gen++
	s := &session{gen: c.gen, stream: stream, ended: make(chan struct{})}
	defer close(s.ended)
	c.sess = s
	if c.opened {
		c.stats.Reconnects++
	}
	c.opened = true
	// Requests sent on the session that broke were either never answered
	// or answered in a message we never received: a request is answered on
	// the session it was sent on, so they go again, each with a new send
	// time (a later one is sound: it is still read before this send).
	var resend []*call
	for _, cl := range c.calls {
		if cl.waiters == 0 {
			c.forgetLocked(cl) // abandoned while no session was open
			continue
		}
		c.markSentLocked(cl, s)
		resend = append(resend, cl)
	}
	c.mu.Unlock()
	sort.Slice(resend, func(i, j int) bool { return resend[i].id < resend[j].id })
	for _, cl := range resend {
		if s.send(getRequest(cl)) != nil {
			break // Recv reports the break
		}
	}

	// One goroutine handles every message, in the order the leader sent
	// them: a GetResponse is stored before an Invalidate that follows it
	// is handled (argument D).
	for {
		msg, err := stream.Recv()
		if err != nil {
			c.endSession(s, err)
			return healthy
		}
		healthy = true
		switch m := msg.Msg.(type) {
		case *cachepb.SessionResponse_Get:
			c.handleGet(s, m.Get)
		case *cachepb.SessionResponse_Invalidate:
			c.handleInvalidate(s, m.Invalidate)
		}
	}
}

func (c *Cache) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// endSession records that s broke. Entries stay: each was leased by a
// leader that lets no write of its key through before the entry's deadline
// unless we acknowledged dropping it (argument B), and a new leader waits
// out every lease of its predecessors before its first write (argument C);
// a session that broke only means we can no longer be asked. Unanswered
// requests wait for the next session, except abandoned ones.
func (c *Cache) endSession(s *session, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == s {
		c.sess = nil
	}
	c.lastErr = err
	unimplemented := status.Code(err) == codes.Unimplemented
	for _, cl := range c.calls {
		switch {
		case unimplemented:
			// The member does not serve read leases: waiting would last
			// until ctx ends, with nothing to show why.
			c.finishLocked(cl, fmt.Errorf("cache: the server does not serve read leases: %w", err))
		case cl.waiters == 0:
			c.forgetLocked(cl)
		}
	}
}

// handleGet stores a leased answer and wakes the Gets waiting for it. It
// runs on the receiving goroutine, not the Get's: storing is then ordered
// before any Invalidate that follows the answer (argument D), however late
// the Get is scheduled.
func (c *Cache) handleGet(s *session, r *cachepb.GetResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.calls[r.Id]
	if cl == nil || cl.gen != s.gen {
		// Abandoned and forgotten, or failed by Close. Not storing a value
		// is always safe.
		return
	}
	if r.Code != 0 {
		c.finishLocked(cl, statusError(r.Code, r.Message))
		return
	}
	cl.kv = toKV(r.Kv)
	cl.answered = cl.sends
	if lease := leaseDuration(r.LeaseMs); lease > 0 {
		// The leader measures the lease from when it granted it, after it
		// received this request, so sendTime+lease is no later than the
		// leader's deadline on the leader's clock; the margin absorbs the
		// difference in the clocks' rates (argument A).
		deadline := cl.sendTime.Add(lease - c.cfg.marginFor(lease))
		if c.cfg.clock.Now().Before(deadline) {
			c.storeLocked(cl.key, cl.kv, deadline)
			cl.leased = true
		}
	}
	if !cl.leased {
		c.stats.Uncached++
	}
	c.finishLocked(cl, nil)
}

// handleInvalidate drops the keys, and only then acknowledges: the leader
// lets the write through on the acknowledgement (argument B), so an
// acknowledgement sent before the drop would let a Get serve the old value
// after the write completed.
func (c *Cache) handleInvalidate(s *session, inv *cachepb.Invalidate) {
	c.mu.Lock()
	for _, k := range inv.Keys {
		if e := c.entries[string(k)]; e != nil {
			c.removeLocked(e)
		}
		c.stats.Invalidations++
	}
	c.mu.Unlock()
	// A failed send means the session broke; the leader then waits the
	// lease out instead, and the entry is gone already.
	_ = s.send(&cachepb.SessionRequest{Msg: &cachepb.SessionRequest_Ack{
		Ack: &cachepb.InvalidateAck{Seq: inv.Seq},
	}})
}

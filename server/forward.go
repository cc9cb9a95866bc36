package server

import (
	"context"
	"errors"
	"time"

	"github.com/corenode/corenode/lessor"
	"github.com/corenode/corenode/node"
)

// Forwarding: a member that does not lead passes writes, linearizable
// reads' index questions and leader-only calls to the leader (OnLeader),
// one hop per attempt, and retries them on a new leader only when that
// cannot apply them twice. The decision is taken on typed errors, which
// Peers and the edge's remote calls return.

var (
	// ErrNotLeader says the member asked does not lead: the request may go
	// to whoever does. The edge answers etcd's "not leader".
	ErrNotLeader = lessor.ErrNotLeader
	// ErrLeaderChanged says the leader changed while a request that is not
	// idempotent was on its way: its outcome is unknown.
	ErrLeaderChanged = node.ErrLeaderChanged
	// ErrNotSent says a forwarded request certainly never left this
	// member: sending it again cannot apply it twice.
	ErrNotSent = errors.New("server: the request never left this member")
	// ErrNoLeader says no leader was known before the request's deadline.
	ErrNoLeader = errors.New("server: no leader")
)

// Unreachable is a forwarded request's failure to hear from the leader
// after the request may have left this member (a reset connection, an
// EOF): it may have been applied. Err is what the connection said, and
// what a client hears.
type Unreachable struct{ Err error }

func (u *Unreachable) Error() string { return u.Err.Error() }
func (u *Unreachable) Unwrap() error { return u.Err }

// errAbandoned marks a forwarded call given up grace after the leader
// changed.
var errAbandoned = errors.New("server: leader changed during a forwarded call")

// isNotLeader reports whether err says that the member asked does not
// lead (every leader-only layer says it with lessor.ErrNotLeader).
func isNotLeader(err error) bool { return errors.Is(err, ErrNotLeader) }

// retry reports whether a forwarded call that failed with err may be sent
// again: always when it never reached a leader's log; when its fate is
// unknown, only if it is idempotent.
func retry(err error, idempotent bool) bool {
	var u *Unreachable
	switch {
	case isNotLeader(err), errors.Is(err, ErrNotSent):
		return true
	case errors.Is(err, errAbandoned), errors.As(err, &u):
		return idempotent
	}
	return false
}

// OnLeader runs local on this member if it leads, else remote against the
// leader's peer address, retrying while leadership moves and the deadline
// allows. A forwarded call is abandoned grace after this member sees the
// leader change (an old leader that handed over answers within
// milliseconds, one that vanished with its host never does, and its
// connection may not fail for minutes); idempotent calls then go to the
// new leader, the others fail with ErrLeaderChanged, as their outcome is
// unknown. Errors are returned as they came, for the edge to map.
func OnLeader[T any](s *Server, ctx context.Context, idempotent bool,
	local func(context.Context) (T, error),
	remote func(ctx context.Context, leader string) (T, error),
) (T, error) {
	ctx, cancel := s.WithTimeout(ctx)
	defer cancel()
	var zero T
	for attempt := 0; ; attempt++ {
		if s.node.IsLeader() {
			resp, err := local(ctx)
			if !isNotLeader(err) {
				return resp, err
			}
		}
		if s.callers.Forwarded(ctx) {
			// The sender retries against whoever leads now.
			return zero, ErrNotLeader
		}
		changed, ready := s.node.LeaderChange(), s.node.ReadyChange()
		leader, err := s.Leader(ctx)
		if err != nil {
			return zero, err
		}
		if leader == "" {
			// This member leads but could not serve yet (a fresh leader
			// before its barrier): try again once it is ready, or once
			// leadership moved.
			if s.node.Ready() {
				continue
			}
			select {
			case <-ctx.Done():
				return zero, ctx.Err()
			case <-ready:
			case <-changed:
			}
			continue
		}
		resp, err := forward(s, ctx, changed, func(ctx context.Context) (T, error) { return remote(ctx, leader) })
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		if !retry(err, idempotent) {
			if errors.Is(err, errAbandoned) {
				return zero, ErrLeaderChanged
			}
			return zero, err
		}
		select {
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-time.After(time.Duration(min(attempt+1, 10)) * 20 * time.Millisecond):
		}
	}
}

// Leader returns the leader's peer address, or "" when this member leads,
// waiting for an election to finish until ctx ends (ErrNoLeader).
func (s *Server) Leader(ctx context.Context) (string, error) {
	for {
		changed := s.node.LeaderChange()
		id, addr := s.node.Leader()
		if id == s.node.ID() && s.node.IsLeader() {
			return "", nil
		}
		if addr != "" && id != s.node.ID() {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", ErrNoLeader
		case <-changed:
		}
	}
}

// forward runs remote until it returns, or until grace after changed
// closes (the leader changed): errAbandoned. Calls of one leader's term
// share the timer that abandons them (see abandonment), so a forwarded
// write costs no goroutine of its own.
func forward[T any](s *Server, ctx context.Context, changed <-chan struct{}, remote func(context.Context) (T, error)) (T, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.abandonment(changed), cancel)
	defer stop()
	resp, err := remote(rctx)
	if err != nil && rctx.Err() != nil && ctx.Err() == nil {
		var zero T
		return zero, errAbandoned
	}
	return resp, err
}

// abandonment returns a context that ends grace after changed closes.
// Callers pass the channel node.LeaderChange returned when they looked up
// the leader; those of one term share one context, and its one goroutine.
func (s *Server) abandonment(changed <-chan struct{}) context.Context {
	s.amu.Lock()
	defer s.amu.Unlock()
	if s.abandon.changed == changed {
		return s.abandon.ctx
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.abandon.changed, s.abandon.ctx = changed, ctx
	grace := s.grace
	go func() {
		<-changed
		time.AfterFunc(grace, cancel)
	}()
	return ctx
}

package server

import (
	"context"
	"errors"
	"time"
)

// servingWait bounds how long Serving waits for a read index: a verdict
// later than a probe's timeout helps nobody, and a leader that holds a
// quorum names one within a round trip.
const servingWait = 2 * time.Second

// Serving returns nil when this member would serve a linearizable read
// now, else why not: it has caught up since it started (ErrCatchingUp),
// the corruption check has not named it (its reads refuse, ErrCorrupt),
// it knows a leader (ErrNoLeader), and that leader names a read index this
// member reaches, which proves the leader still holds a quorum. It is the
// gRPC health service's verdict (grpc.health.v1, service "") and
// /readyz's. With no leader known it answers at once rather than wait
// for an election: a Kubernetes probe gives up after a second, and a
// member that has no leader would not serve the read now.
func (s *Server) Serving(ctx context.Context) error {
	select {
	case <-s.node.CaughtUp():
	default:
		return ErrCatchingUp
	}
	if s.Corrupt() {
		return ErrCorrupt
	}
	if id, _ := s.node.Leader(); id == 0 {
		return ErrNoLeader
	}
	ctx, cancel := context.WithTimeout(ctx, servingWait)
	defer cancel()
	return s.AwaitLinearizable(ctx)
}

// WatchServing calls send with Serving's verdict, then again each time it
// changes, until ctx ends (its error) or send fails (send's).
//
// It waits on what announces a change: the leader (LeaderChange: an
// election; a leader that lost its quorum steps down within raft's
// LeaderLeaseTimeout, and a follower that stops hearing its leader
// campaigns, so both show there), the catch-up (CaughtUp), and the
// CORRUPT alarm (an applied entry raises it: AppliedChanged, and the
// verdict is taken again only if Corrupt() flipped). One failure announces
// nothing: a read-index round that failed while a leader is known (the
// leader slow to answer, or this member unable to reach it over the peer
// port while raft still hears it). Only then is the verdict taken again
// after a timer, one election timeout, as a forwarded call's grace.
func (s *Server) WatchServing(ctx context.Context, send func(serving bool) error) error {
	sent, last := false, false
	for {
		leader, applied, caughtUp := s.node.LeaderChange(), s.node.FSM().AppliedChanged(), s.node.CaughtUp()
		select {
		case <-caughtUp:
			caughtUp = nil // closed: it would wake the wait at once
		default:
		}
		corrupt := s.Corrupt()
		err := s.Serving(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if serving := err == nil; !sent || serving != last {
			if err := send(serving); err != nil {
				return err
			}
			sent, last = true, serving
		}
		var retry <-chan time.Time
		var timer *time.Timer
		if err != nil && !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrCatchingUp) && !errors.Is(err, ErrCorrupt) {
			timer = time.NewTimer(s.grace)
			retry = timer.C
		}
		err = s.awaitServingChange(ctx, leader, applied, caughtUp, retry, corrupt)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return err
		}
	}
}

// awaitServingChange returns once one of WatchServing's announcements
// came, or ctx ended (its error).
func (s *Server) awaitServingChange(ctx context.Context, leader, applied, caughtUp <-chan struct{}, retry <-chan time.Time, corrupt bool) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-leader:
			return nil
		case <-caughtUp:
			return nil
		case <-retry:
			return nil
		case <-applied:
			applied = s.node.FSM().AppliedChanged()
			if s.Corrupt() != corrupt {
				return nil
			}
		}
	}
}

package server

import (
	"context"
	"errors"
)

// Linearizable runs read on this member's state once that state includes
// every write acknowledged, or applied anywhere, before the call: the
// member gets a read index (node.ReadIndex; a follower asks the leader for
// it) and waits until it has applied that far. The read itself never
// leaves the member, and a follower's concurrent reads share the round
// trips.
func Linearizable[T any](s *Server, ctx context.Context, read func() (T, error)) (T, error) {
	var zero T
	return OnLeader(s, ctx, true, func(ctx context.Context) (T, error) {
		index, err := s.node.ReadIndex(ctx)
		if err != nil {
			return zero, err
		}
		if err := s.node.FSM().WaitApplied(ctx, index); err != nil {
			return zero, err
		}
		return read()
	}, func(ctx context.Context, _ string) (T, error) {
		index, err := s.indexRounds.Do(ctx)
		if err != nil {
			return zero, err
		}
		if err := s.node.FSM().WaitApplied(ctx, index); err != nil {
			return zero, err
		}
		return read()
	})
}

// AwaitLinearizable returns once this member's state includes every write
// acknowledged before the call (Linearizable, reading nothing).
func (s *Server) AwaitLinearizable(ctx context.Context) error {
	_, err := Linearizable(s, ctx, func() (struct{}, error) { return struct{}{}, nil })
	return err
}

// ReadIndex is the leader's answer to a follower's read-index question.
func (s *Server) ReadIndex(ctx context.Context) (uint64, error) {
	return s.node.ReadIndex(ctx)
}

// askReadIndex is one read-index round trip to the leader, shared by the
// reads that joined it (a round already in flight may have been answered
// by a leader deposed before a later read began, so reads join only a
// round not yet sent; see round.Group).
//
// A round is given two election timeouts, not the request timeout: a
// leader answers within one (its leadership check gives up after that), so
// no answer by then means the question or its answer was lost, on a
// connection that stayed open (a link that dropped bytes for a while).
// Every read waits on the round in flight, so nothing else would be sent
// on that connection to reveal it broken, and the follower served no
// linearizable read until the request timeout. The round fails as "not
// leader", and the reads ask again at once, on a new round (as etcd sends
// its read-index request again every 500 ms).
func (s *Server) askReadIndex() (uint64, error) {
	bound := s.requestTimeout
	if g := 2 * s.grace; g > 0 && g < bound {
		bound = g
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	changed := s.node.LeaderChange()
	leader, err := s.Leader(ctx)
	if err != nil {
		return 0, err
	}
	if leader == "" {
		return 0, ErrNotLeader // this member leads now; the caller retries locally
	}
	index, err := forward(s, ctx, changed, func(ctx context.Context) (uint64, error) {
		return s.peers.ReadIndex(ctx, leader)
	})
	// A question lost with its stream (ErrLeaderChanged) is asked again: a
	// read has no outcome to be unsure of.
	if errors.Is(err, errAbandoned) || errors.Is(err, ErrLeaderChanged) || (err != nil && ctx.Err() != nil) {
		return 0, ErrNotLeader // retryable: the caller asks again
	}
	return index, err
}

package server

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// What the edge may know of this member without reaching into the node:
// the parts of a response header, the leader as known here, and whether
// the member has caught up since it started.

// HeaderOf returns this member's view for a response header at rev: the
// cluster, this member and the current raft term.
func (s *Server) HeaderOf(rev int64) (cluster, member, term uint64) {
	return s.node.ClusterID(), s.node.ID(), s.node.Term()
}

// Rev is the current revision of this member's store.
func (s *Server) Rev() int64 { return s.node.Store().Rev() }

// LeaderID is the leader this member knows of, or 0 for none; it does not
// wait for an election.
func (s *Server) LeaderID() uint64 {
	id, _ := s.node.Leader()
	return id
}

// LeaderChange returns a channel closed at the next change of the leader
// this member knows of (node.LeaderChange); take it before looking at the
// leader, so no change is missed.
func (s *Server) LeaderChange() <-chan struct{} { return s.node.LeaderChange() }

// CaughtUp is closed once this member has caught up with the cluster since
// it started (node.CaughtUp); until then it serves no client call.
func (s *Server) CaughtUp() <-chan struct{} { return s.node.CaughtUp() }

// AwaitCaughtUp waits until this member has caught up, or ctx ends.
func (s *Server) AwaitCaughtUp(ctx context.Context) error { return s.node.AwaitCaughtUp(ctx) }

// Alarms are the alarms raised in this member's state.
func (s *Server) Alarms() []*pb.AlarmMember { return s.node.FSM().Alarms() }

// ClusterAge is how long this member has been part of the cluster with a
// leader (a new leader's strict reconfiguration check asks).
func (s *Server) ClusterAge() time.Duration { return s.node.ClusterAge() }

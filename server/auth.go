package server

import (
	"context"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/kv"
)

// Reads are checked on the member that serves them, against its state;
// writes carry their caller in the log entry and are checked where they
// apply (see Propose), so a permission revoked while a write was in flight
// is honoured on every member alike.

// AuthStore returns the auth state.
func (s *Server) AuthStore() *auth.Store { return s.node.FSM().Auth() }

// Allow runs check for ctx's caller, unless nothing is to be checked.
func (s *Server) Allow(ctx context.Context, check func(auth.Info) error) error {
	ai, checked, err := s.callers.Caller(ctx)
	if err == nil && checked {
		err = check(ai)
	}
	return err
}

// AuthorizeRead checks that ctx's caller may make req, a read; services
// call it just before they read.
func (s *Server) AuthorizeRead(ctx context.Context, req any) error {
	return s.Allow(ctx, func(ai auth.Info) error { return s.AuthorizeRequest(ai, req) })
}

// AuthorizeRequest is the permission rule of a request checked on the
// member that receives it.
func (s *Server) AuthorizeRequest(ai auth.Info, req any) error {
	st := s.AuthStore()
	store := s.node.FSM().Store()
	switch r := req.(type) {
	case *pb.RangeRequest:
		return st.CheckKeys(ai, r, store.LeaseKeys)
	case *pb.TxnRequest:
		if !kv.IsReadOnlyTxn(r) {
			return nil // checked where it applies
		}
		return st.CheckKeys(ai, r, store.LeaseKeys)
	case *pb.LeaseTimeToLiveRequest:
		if err := st.RequireUser(ai); err != nil || !r.Keys {
			return err
		}
		return st.CheckLeaseKeys(ai, store.LeaseKeys(r.ID), authpb.READ)
	case *pb.LeaseLeasesRequest:
		if err := st.RequireUser(ai); err != nil {
			return err
		}
		for _, l := range s.node.FSM().Leases() {
			if err := st.CheckLeaseKeys(ai, store.LeaseKeys(l.ID), authpb.READ); err != nil {
				return err
			}
		}
		return nil
	case *pb.AlarmRequest:
		if r.Action == pb.AlarmRequest_GET {
			return st.RequireUser(ai)
		}
		return st.IsAdminPermitted(ai)
	}
	return st.IsAdminPermitted(ai)
}

// AuthorizeRenew is etcd's rule for a keep-alive: credentials, and write
// on every key the lease holds.
func (s *Server) AuthorizeRenew(ai auth.Info, id int64) error {
	st := s.AuthStore()
	if err := st.RequireUser(ai); err != nil {
		return err
	}
	return st.CheckLeaseKeys(ai, s.node.FSM().Store().LeaseKeys(id), authpb.WRITE)
}

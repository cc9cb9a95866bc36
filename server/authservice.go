package server

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/fsm"
)

// The Auth service: every request but Authenticate goes through the log as
// fsm.OpAuth with the caller in its header, as etcd's does, and the auth
// state checks root where it applies. Passwords are hashed at the edge's
// side of the log (the member that received them), never in it.

// ProposeAuth runs an Auth service request through the write pipeline
// and returns its response; newResp returns an empty response of r's
// type.
func (s *Server) ProposeAuth(ctx context.Context, r *pb.InternalRaftRequest, newResp func() Message) (Message, error) {
	if r.Header == nil {
		hdr, err := s.As(ctx)
		if err != nil {
			return nil, err
		}
		r.Header = hdr
	}
	return s.propose(ctx, fsm.OpAuth, r, newResp)
}

// Authenticate checks the password on this member (bcrypt, with the
// back-off after failures), then commits the token through the log so
// every member knows it. If the auth state changed between the check and
// the commit (a new password, say), the entry is refused and the check
// runs again, as etcd's optimistic loop does.
func (s *Server) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	st := s.AuthStore()
	// caughtUp waits until this member has applied every entry committed
	// before the call.
	caughtUp := func() error { return s.AwaitLinearizable(ctx) }
	for attempt := 0; ; attempt++ {
		// Check against state that includes every change acknowledged
		// before this call (a password just changed, say).
		if err := caughtUp(); err != nil {
			return nil, err
		}
		rev, err := st.Login(r.Name, r.Password)
		s.countLogin(err)
		if err != nil {
			return nil, err
		}
		prefix, err := auth.NewTokenPrefix()
		if err != nil {
			return nil, err
		}
		req := &pb.InternalRaftRequest{Header: &pb.RequestHeader{AuthRevision: rev},
			Authenticate: &pb.InternalAuthenticateRequest{Name: r.Name, SimpleToken: prefix}}
		resp, err := Propose[pb.AuthenticateResponse](s, ctx, fsm.OpAuth, req)
		if errors.Is(err, auth.ErrAuthOldRevision) && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, err
		}
		// The leader applied the token's entry; this member, which the
		// client will call with the token next, must know it too.
		if err := caughtUp(); err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// RegisterAuthMetrics adds the login counters to reg.
func (s *Server) RegisterAuthMetrics(reg prometheus.Registerer) {
	s.logins = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corenode_auth_logins_total",
		Help: "Authenticate calls checked on this member, by result: ok, password (wrong password), user (no such user, or one without a password), backoff (refused unchecked after repeated failures)."},
		[]string{"result"})
	reg.MustRegister(s.logins)
}

func (s *Server) countLogin(err error) {
	if s.logins == nil || errors.Is(err, auth.ErrAuthNotEnabled) {
		return
	}
	result := "ok"
	var le *auth.LoginError
	if errors.As(err, &le) {
		result = le.Reason
	} else if err != nil {
		return
	}
	s.logins.WithLabelValues(result).Inc()
}

package transport

import (
	"context"
	"crypto/x509"
	"errors"
	"net"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/corenode/corenode/api/cachepb"
	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/server"
)

// Who a client call acts for is resolved on the member the client reached,
// from the token in its metadata ("token", or "authorization" from the
// JSON gateway) or, with --client-cert-auth, its certificate's common
// name. Every rule below is etcd 3.6's, checked against a running etcd
// (docs/operations.md lists them):
//
//   - reads (Range, a Txn that only reads, Watch, TimeToLive with keys,
//     Leases, cached reads) are checked here, against this member's state;
//   - writes (Put, DeleteRange, a writing Txn, LeaseRevoke) carry the
//     caller in their log entry (fsm.OpAs) and are checked where they
//     apply, so a permission revoked while a write was in flight is
//     honoured on every member alike;
//   - the Auth service's requests carry the caller the same way, and the
//     auth state checks root where they apply.
//
// Requests a member forwards to the leader arrive on the peer port, which
// has no interceptor: the member that received them checked them, and
// writes carry the caller inside. The peer port must therefore be reachable
// only by members (a private network, or --peer-client-cert-auth).

// callerKey marks the context of a call that came in on a client port:
// who it acts for is resolved from the call's metadata only when asked,
// and only while auth is enabled, so a cluster without auth pays one
// context value per call.
type callerKey struct{}

type caller struct {
	certAuth bool // --client-cert-auth: a verified certificate's CN is the user
}

var callers = [2]*caller{{certAuth: false}, {certAuth: true}}

// rule is what a method needs, before its request is looked at.
type rule int

const (
	// ruleRoot: only a user with the root role (the default for any
	// method not listed, so a new RPC is closed until it is decided).
	ruleRoot rule = iota
	// ruleOpen: no credentials are looked at.
	ruleOpen
	// ruleUser: any valid credentials (etcd's requireAuthInfo).
	ruleUser
	// ruleRequest: the request decides; see authorizeRequest.
	ruleRequest
	// ruleRead: the request decides, checked by the handler against the
	// state it reads (after a linearizable read's wait), as etcd checks
	// its reads: a read on a member that has not yet applied an auth
	// change it must see is not judged by the older state.
	ruleRead
)

var methodRules = map[string]rule{
	"/etcdserverpb.KV/Range":       ruleRead,
	"/etcdserverpb.KV/RangeStream": ruleRead,
	"/etcdserverpb.KV/Put":         ruleOpen, // checked where it applies
	"/etcdserverpb.KV/DeleteRange": ruleOpen, // checked where it applies
	"/etcdserverpb.KV/Txn":         ruleRead, // a writing Txn is checked where it applies
	"/etcdserverpb.KV/Compact":     ruleRoot,

	"/etcdserverpb.Watch/Watch": ruleOpen, // each create is checked

	"/etcdserverpb.Lease/LeaseGrant":      ruleUser,
	"/etcdserverpb.Lease/LeaseRevoke":     ruleUser, // and where it applies
	"/etcdserverpb.Lease/LeaseKeepAlive":  ruleOpen, // each renewal is checked
	"/etcdserverpb.Lease/LeaseTimeToLive": ruleRequest,
	"/etcdserverpb.Lease/LeaseLeases":     ruleRead,

	"/etcdserverpb.Cluster/MemberList":    ruleUser,
	"/etcdserverpb.Cluster/MemberAdd":     ruleRoot,
	"/etcdserverpb.Cluster/MemberRemove":  ruleRoot,
	"/etcdserverpb.Cluster/MemberUpdate":  ruleRoot,
	"/etcdserverpb.Cluster/MemberPromote": ruleRoot,

	"/etcdserverpb.Maintenance/Alarm":      ruleRequest,
	"/etcdserverpb.Maintenance/Status":     ruleUser,
	"/etcdserverpb.Maintenance/Defragment": ruleRoot,
	"/etcdserverpb.Maintenance/Hash":       ruleRoot,
	"/etcdserverpb.Maintenance/HashKV":     ruleRoot,
	"/etcdserverpb.Maintenance/Snapshot":   ruleRoot,
	"/etcdserverpb.Maintenance/MoveLeader": ruleRoot,
	"/etcdserverpb.Maintenance/Downgrade":  ruleRoot,

	// The Auth service's own: root is checked where they apply (UserGet
	// and RoleGet let a user see itself and its roles), Authenticate needs
	// no credentials.
	"/etcdserverpb.Auth/Authenticate":         ruleOpen,
	"/etcdserverpb.Auth/AuthEnable":           ruleOpen,
	"/etcdserverpb.Auth/AuthDisable":          ruleOpen,
	"/etcdserverpb.Auth/AuthStatus":           ruleOpen,
	"/etcdserverpb.Auth/UserAdd":              ruleOpen,
	"/etcdserverpb.Auth/UserGet":              ruleOpen,
	"/etcdserverpb.Auth/UserList":             ruleOpen,
	"/etcdserverpb.Auth/UserDelete":           ruleOpen,
	"/etcdserverpb.Auth/UserChangePassword":   ruleOpen,
	"/etcdserverpb.Auth/UserGrantRole":        ruleOpen,
	"/etcdserverpb.Auth/UserRevokeRole":       ruleOpen,
	"/etcdserverpb.Auth/RoleAdd":              ruleOpen,
	"/etcdserverpb.Auth/RoleGet":              ruleOpen,
	"/etcdserverpb.Auth/RoleList":             ruleOpen,
	"/etcdserverpb.Auth/RoleDelete":           ruleOpen,
	"/etcdserverpb.Auth/RoleGrantPermission":  ruleOpen,
	"/etcdserverpb.Auth/RoleRevokePermission": ruleOpen,
	cachepb.Cache_Session_FullMethodName:      ruleOpen, // each read is checked
	// Probes carry no credentials, and the answer tells nothing of the data.
	healthpb.Health_Check_FullMethodName: ruleOpen,
	healthpb.Health_List_FullMethodName:  ruleOpen,
	healthpb.Health_Watch_FullMethodName: ruleOpen,
}

// AuthOptions returns the interceptors of the client port: they mark each
// call as a client's and apply its method's rule. clientCertAuth makes a
// verified certificate's common name the user of a call without a token.
func (s *Server) AuthOptions(clientCertAuth bool) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if clientCertAuth {
		opts = append(opts, grpc.Creds(tlsStateCreds{}))
	}
	return append(opts,
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ctx = withCaller(ctx, clientCertAuth)
			if err := s.authorizeMethod(ctx, info.FullMethod, req); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			ctx := withCaller(ss.Context(), clientCertAuth)
			if err := s.authorizeMethod(ctx, info.FullMethod, nil); err != nil {
				return err
			}
			return h(srv, &callerStream{ServerStream: ss, ctx: ctx})
		}),
	)
}

// tlsStateCreds hands gRPC the TLS state of a client connection. The client
// mux terminates TLS (it serves HTTP on the same port), so gRPC itself sees
// a plain connection and would know no certificate; with this, the peer's
// AuthInfo holds the verified chains, as with gRPC's own TLS.
type tlsStateCreds struct{}

func (tlsStateCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if bc, ok := c.(*bufferedConn); ok {
		if st, ok := bc.tlsState(); ok {
			return c, credentials.TLSInfo{State: st, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
		}
	}
	return c, nil, nil
}

func (tlsStateCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("transport: tlsStateCreds serves only")
}

func (tlsStateCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}
func (tlsStateCreds) Clone() credentials.TransportCredentials { return tlsStateCreds{} }
func (tlsStateCreds) OverrideServerName(string) error         { return nil }

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *callerStream) Context() context.Context { return c.ctx }

func withCaller(ctx context.Context, clientCertAuth bool) context.Context {
	c := callers[0]
	if clientCertAuth {
		c = callers[1]
	}
	return context.WithValue(ctx, callerKey{}, c)
}

func commonName(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return ""
	}
	var leaf *x509.Certificate
	for _, chain := range ti.State.VerifiedChains {
		if len(chain) > 0 {
			leaf = chain[0]
			break
		}
	}
	if leaf == nil {
		return ""
	}
	return leaf.Subject.CommonName
}

func (s *Server) authStore() *auth.Store { return s.req.AuthStore() }

// Callers resolves who a call acts for from its credentials, for the
// request layer (server.Callers).
type Callers struct {
	// Auth is the auth state tokens and names are checked against.
	Auth *auth.Store
}

var _ server.Callers = Callers{}

// Caller resolves who ctx's call acts for. checked is false for a call
// that did not come in on a client port (forwarded by a member), or while
// auth is disabled: nothing is to be checked then.
func (c Callers) Caller(ctx context.Context) (ai auth.Info, checked bool, err error) {
	st := c.Auth
	cl, ok := ctx.Value(callerKey{}).(*caller)
	if !ok || !st.Enabled() {
		return auth.Info{}, false, nil
	}
	for _, name := range []string{rpctypes.TokenFieldNameGRPC, rpctypes.TokenFieldNameSwagger} {
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 {
			ai, err := st.InfoFromToken(v[0])
			return ai, true, err
		}
	}
	if cl.certAuth {
		if cn := commonName(ctx); cn != "" {
			return st.InfoFromCommonName(cn), true, nil
		}
	}
	return auth.Info{}, true, nil
}

// Forwarded reports whether another member forwarded ctx's call.
func (Callers) Forwarded(ctx context.Context) bool { return isForwarded(ctx) }

// allow runs check for ctx's caller, unless nothing is to be checked; the
// error is etcd's.
func (s *Server) allow(ctx context.Context, check func(auth.Info) error) error {
	return mapErr(ctx, s.req.Allow(ctx, check))
}

func (s *Server) authorizeMethod(ctx context.Context, method string, req any) error {
	r, ok := methodRules[method]
	if !ok {
		r = ruleRoot
	}
	st := s.authStore()
	switch r {
	case ruleOpen, ruleRead:
		return nil
	case ruleUser:
		return s.allow(ctx, st.RequireUser)
	case ruleRoot:
		return s.allow(ctx, st.IsAdminPermitted)
	}
	return s.allow(ctx, func(ai auth.Info) error { return s.req.AuthorizeRequest(ai, req) })
}

// authorizeRead checks a ruleRead request; handlers call it just before
// they read.
func (s *Server) authorizeRead(ctx context.Context, req any) error {
	return mapErr(ctx, s.req.AuthorizeRead(ctx, req))
}

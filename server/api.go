package server

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/auth"
)

// API is the request layer as the edge sees it: every call transport makes
// below itself goes through it, as etcd's v3rpc reaches its server through
// RaftKV, Lessor and the like. *Server implements it. Errors are those of
// the layers below, for the edge's one table to map. Safe for concurrent
// use.
type API interface {
	KV
	Leases
	Cluster
	Maintenance
	Auth
	Streams
	View
	Peer
}

var _ API = (*Server)(nil)

// Auth is the Auth service and the checks of a caller the edge asks for
// before it looks at a request.
type Auth interface {
	// ProposeAuth runs an Auth service request through the write
	// pipeline; newResp returns an empty response of r's type.
	ProposeAuth(ctx context.Context, r *pb.InternalRaftRequest, newResp func() Message) (Message, error)
	Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error)
	// Allow runs check on ctx's caller while auth is enabled.
	Allow(ctx context.Context, check func(auth.Info) error) error
	// AuthorizeRead checks that ctx's caller may make read req.
	AuthorizeRead(ctx context.Context, req any) error
	// AuthorizeRequest checks that the caller ai may make req.
	AuthorizeRequest(ai auth.Info, req any) error
	AuthStore() *auth.Store
}

// Streams are the calls that answer more than once: a Range in chunks,
// watches, and read-lease sessions.
type Streams interface {
	RangeStream(ctx context.Context, r *pb.RangeRequest, send func(*pb.RangeResponse) error) error
	Watchable() Watchable
	OpenCacheSession(ctx context.Context) (*CacheSession, error)
}

// View is this member's view of itself and the cluster, which the edge
// puts in headers and health answers: revision, leader, term, alarms,
// whether it has caught up, how long calls may take.
type View interface {
	HeaderOf(rev int64) (cluster, member, term uint64)
	Rev() int64
	LeaderID() uint64
	// LeaderChange is closed when the leader next changes.
	LeaderChange() <-chan struct{}
	// CaughtUp is closed once this member has applied what the cluster
	// had committed when it started.
	CaughtUp() <-chan struct{}
	AwaitCaughtUp(ctx context.Context) error
	// AwaitLinearizable returns once this member's state includes every
	// write acknowledged before the call; on a follower, a read index
	// from the leader proves the leader still holds a quorum.
	AwaitLinearizable(ctx context.Context) error
	// Serving is nil when this member would serve a linearizable read
	// now (the gRPC health service's SERVING and /readyz), else why not;
	// WatchServing sends its verdict, then each change of it.
	Serving(ctx context.Context) error
	WatchServing(ctx context.Context, send func(serving bool) error) error
	ClusterAge() time.Duration
	Alarms() []*pb.AlarmMember
	// Corrupt says the corruption check named this member: it answers no
	// read from its own state.
	Corrupt() bool
	Members(ctx context.Context) ([]*pb.Member, error)
	// Leader is the leader's peer address, "" while this member leads; it
	// waits for an election to end until ctx does.
	Leader(ctx context.Context) (string, error)
	WithTimeout(ctx context.Context) (context.Context, context.CancelFunc)
	// Grace is how long a forwarded call may go on once the leader changed.
	Grace() time.Duration
}

// Peer is what this member answers the other members: as leader, their
// forwarded writes and the read index of their linearizable reads; as the
// member a leader removed, that it stops.
type Peer interface {
	ProposeForwarded(ctx context.Context, cmd []byte) (resp any, index uint64, err error)
	ReadIndex(ctx context.Context) (uint64, error)
	// Removed is the answer to the leader that removed member id: if that
	// is this member, it stops.
	Removed(id uint64) error
	// Applied is this member's applied index and then its revision, read
	// in that order (the corruption check's question: see PeerApplied).
	Applied() (index uint64, rev int64)
}

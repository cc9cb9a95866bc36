package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/internal/round"
	"github.com/corenode/corenode/lessor"
	"github.com/corenode/corenode/node"
	"github.com/corenode/corenode/readlease"
)

// Peers is how a member that does not lead reaches the leader; the edge
// implements it over the peer port. Every method may be called
// concurrently, blocks at most until ctx ends, and returns typed errors:
// ErrNotLeader when the member at leader does not lead, ErrNotSent when
// the request certainly never left this member, *Unreachable when the
// leader could not be heard after the request may have left.
type Peers interface {
	// Propose sends an encoded command (fsm.Encode) to the leader at the
	// peer address leader and returns its answer: the encoded response
	// and the log index the command applied at there (0: not said).
	Propose(ctx context.Context, leader string, cmd []byte) (resp []byte, index uint64, err error)
	// Renew relays a keep-alive of lease id to the leader at leader and
	// returns the TTL it was renewed for.
	Renew(ctx context.Context, leader string, id int64) (ttl int64, err error)
	// ReadIndex asks the leader at leader for a read index: once this
	// member applied that far, its state includes every write acknowledged
	// before the call.
	ReadIndex(ctx context.Context, leader string) (uint64, error)
	// Call runs a unary method of the member at the peer address member
	// (a leader-only call, or a word to one member), marked as forwarded.
	Call(ctx context.Context, member, method string, req, resp any) error
	// Retire says this member leads now: the way to a former leader may
	// go once the calls still on it had their grace.
	Retire()
}

// Callers tells who a call acts for, from the credentials it came with,
// which only the edge sees (a token in the call's metadata, a client
// certificate's name). Both methods are safe for concurrent use.
type Callers interface {
	// Caller returns who ctx's call acts for. checked is false when
	// nothing is to be checked: auth is disabled, or another member
	// forwarded the call after checking it.
	Caller(ctx context.Context) (ai auth.Info, checked bool, err error)
	// Forwarded reports whether another member forwarded ctx's call: it
	// is never forwarded again (one hop per attempt).
	Forwarded(ctx context.Context) bool
}

// Limits are the request limits a member enforces before proposing.
type Limits struct {
	// MaxRequestBytes bounds an encoded write request (--max-request-bytes).
	MaxRequestBytes int
	// MaxTxnOps bounds the compares and the ops of each Txn branch (--max-txn-ops).
	MaxTxnOps int
	// QuotaBackendBytes bounds the store's state (--quota-backend-bytes,
	// see fsm.OverQuota); 0 or less is no quota.
	QuotaBackendBytes int64
}

// Config is a Server's settings.
type Config struct {
	Limits Limits
	// ElectionTimeout is the grace a forwarded call gets once the leader
	// changed, and sets the default request timeout.
	ElectionTimeout time.Duration
	Log             *slog.Logger
}

// Server is one member's request layer. Its methods are safe for
// concurrent use.
type Server struct {
	node    *node.Node
	peers   Peers
	callers Callers
	limits  Limits
	log     *slog.Logger
	// requestTimeout bounds a request whose client set no deadline, as
	// etcd's request timeout does.
	requestTimeout time.Duration
	// grace is how long a forwarded call may go on after the leader changed.
	grace time.Duration
	// indexRounds shares read-index round trips among a follower's
	// linearizable reads.
	indexRounds *round.Group[uint64]
	lessor      *lessor.Lessor
	readLeases  *readlease.Manager
	logins      *prometheus.CounterVec // nil until RegisterAuthMetrics

	amu     sync.Mutex
	abandon struct {
		changed <-chan struct{}
		ctx     context.Context
	}
}

// New returns the request layer of the member n.
func New(n *node.Node, peers Peers, callers Callers, cfg Config) *Server {
	if cfg.Limits.MaxRequestBytes == 0 {
		cfg.Limits.MaxRequestBytes = 1536 * 1024
	}
	if cfg.Limits.MaxTxnOps == 0 {
		cfg.Limits.MaxTxnOps = 128
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Server{
		node:           n,
		peers:          peers,
		callers:        callers,
		limits:         cfg.Limits,
		log:            cfg.Log,
		requestTimeout: 5*time.Second + 2*cfg.ElectionTimeout,
		grace:          cfg.ElectionTimeout,
	}
	s.indexRounds = round.New(s.askReadIndex)
	return s
}

// Limits returns the limits the server enforces.
func (s *Server) Limits() Limits { return s.limits }

// Grace is how long a forwarded call may go on after the leader changed.
func (s *Server) Grace() time.Duration { return s.grace }

// WithTimeout bounds ctx by the request timeout unless its caller set a
// deadline.
func (s *Server) WithTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.requestTimeout)
}

// Corrupt reports whether the corruption check has named this member: its
// state differs from the majority's, so it answers no read from it.
func (s *Server) Corrupt() bool {
	return s.node.FSM().HasAlarm(s.node.ID(), pb.AlarmType_CORRUPT)
}

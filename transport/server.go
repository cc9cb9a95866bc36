// Package transport holds corenode's network edges: the etcd v3 gRPC
// services, follower-to-leader forwarding, the raft peer transport, and the
// HTTP endpoints (/health, /livez, /readyz, /metrics).
package transport

import (
	"context"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/api/cachepb"
	"github.com/corenode/corenode/checkpoint"
	"github.com/corenode/corenode/internal/round"
	"github.com/corenode/corenode/lessor"
	"github.com/corenode/corenode/node"
	"github.com/corenode/corenode/readlease"
)

// forwardedKey marks a request a member forwarded to the leader. The leader
// never forwards it again: if it is no longer the leader it says so, and the
// member that forwarded retries against the new one. That bounds every
// request to one hop per attempt.
const forwardedKey = "corenode-forwarded"

// Server implements the etcd v3 services over one member.
type Server struct {
	node   *node.Node
	peers  *PeerMux
	limits Limits
	log    *slog.Logger
	// RequestTimeout bounds a request whose client set no deadline, as etcd's
	// request timeout does.
	requestTimeout time.Duration
	// grace is how long a forwarded call may go on after the leader changed.
	grace time.Duration

	// progressInterval is the watch progress notification period.
	progressInterval time.Duration

	cmu   sync.Mutex
	conns map[string]*grpc.ClientConn // by leader peer address

	// indexRounds shares read-index round trips among a follower's
	// linearizable reads.
	indexRounds *round.Group[uint64]

	leases       *lessor.Lessor
	leaseMetrics *checkpoint.Metrics
	keepAlive    kaForwarder
	proposals    proposalForwarder
	readLeases   *readlease.Manager
	logins       *prometheus.CounterVec
}

// NewServer returns the services for n.
func NewServer(n *node.Node, peers *PeerMux, limits Limits, electionTimeout time.Duration, logger *slog.Logger) *Server {
	if limits.MaxRequestBytes == 0 {
		limits.MaxRequestBytes = 1536 * 1024
	}
	if limits.MaxTxnOps == 0 {
		limits.MaxTxnOps = 128
	}
	s := &Server{
		node:           n,
		peers:          peers,
		limits:         limits,
		log:            logger,
		requestTimeout: 5*time.Second + 2*electionTimeout,
		grace:          electionTimeout,
		conns:          map[string]*grpc.ClientConn{},
	}
	s.progressInterval = DefaultProgressNotifyInterval
	s.indexRounds = round.New(s.askReadIndex)
	return s
}

// Register adds the client-facing services to g. Members also serve them on
// the peer port, where forwarded requests arrive.
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(&kvServiceDesc, &kvService{s})
	pb.RegisterWatchServer(g, &watchService{s})
	pb.RegisterClusterServer(g, &clusterService{s})
	pb.RegisterMaintenanceServer(g, &maintenanceService{s})
	if s.leases != nil {
		pb.RegisterLeaseServer(g, &leaseService{s})
	}
	if s.readLeases != nil {
		cachepb.RegisterCacheServer(g, &cacheService{s: s})
	}
	pb.RegisterAuthServer(g, &authService{s})
}

// RegisterPeer adds the member-to-member services to g.
func (s *Server) RegisterPeer(g *grpc.Server) {
	s.Register(g)
	g.RegisterService(&peerServiceDesc, &peerService{s})
}

// Close drops connections to other members.
func (s *Server) Close() {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.keepAlive.close()
	s.proposals.close()
	for addr, c := range s.conns {
		c.Close()
		delete(s.conns, addr)
	}
}

// header fills a response header as etcd does: this member's view.
func (s *Server) header(h *pb.ResponseHeader) *pb.ResponseHeader {
	if h == nil {
		h = &pb.ResponseHeader{Revision: s.node.Store().Rev()}
	}
	v := s.headerOf(h.Revision)
	h.ClusterId, h.MemberId, h.RaftTerm = v.cluster, v.member, v.term
	return h
}

// headerOf is the header of a response at revision rev, as a comparable
// value (the watch encoder keys its cache on it).
func (s *Server) headerOf(rev int64) header {
	return header{cluster: s.node.ClusterID(), member: s.node.ID(), term: s.node.Term(), rev: rev}
}

func isForwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

func (s *Server) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.requestTimeout)
}

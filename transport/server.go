package transport

import (
	"context"
	"log/slog"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/corenode/corenode/api/cachepb"
	"github.com/corenode/corenode/server"
)

// forwardedKey marks a request a member forwarded to the leader. The leader
// never forwards it again: if it is no longer the leader it says so, and the
// member that forwarded retries against the new one. That bounds every
// request to one hop per attempt.
const forwardedKey = "corenode-forwarded"

// Server implements the etcd v3 services over one member: it decodes a
// call, runs it in the request layer (req, kv), maps the error and fills
// the header.
type Server struct {
	req   server.API
	kv    server.KV
	peers *PeerClient
	log   *slog.Logger
	// grace is how long a forwarded call may go on after the leader changed.
	grace time.Duration

	// progressInterval is the watch progress notification period.
	progressInterval time.Duration

	leases      server.Leases
	cluster     server.Cluster
	maintenance server.Maintenance

	// done ends with Close: the proposal connections served close then.
	done context.Context
	stop context.CancelFunc
}

// NewServer returns the services of the member whose requests req runs
// and whose peer-port client is peers.
func NewServer(req server.API, peers *PeerClient, logger *slog.Logger) *Server {
	done, stop := context.WithCancel(context.Background())
	return &Server{
		done:             done,
		stop:             stop,
		req:              req,
		kv:               req,
		leases:           req,
		cluster:          req,
		maintenance:      req,
		peers:            peers,
		log:              logger,
		grace:            req.Grace(),
		progressInterval: DefaultProgressNotifyInterval,
	}
}

// Register adds the client-facing services to g. Members also serve them on
// the peer port, where forwarded requests arrive.
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(&kvServiceDesc, &kvService{s})
	pb.RegisterWatchServer(g, &watchService{s})
	pb.RegisterClusterServer(g, &clusterService{s})
	pb.RegisterMaintenanceServer(g, &maintenanceService{s})
	pb.RegisterLeaseServer(g, &leaseService{s})
	cachepb.RegisterCacheServer(g, &cacheService{s: s})
	pb.RegisterAuthServer(g, &authService{s})
	healthpb.RegisterHealthServer(g, &healthService{s: s})
}

// RegisterPeer adds the member-to-member services to g.
func (s *Server) RegisterPeer(g *grpc.Server) {
	s.Register(g)
	g.RegisterService(&peerServiceDesc, &peerService{s})
}

// Close drops connections to other members, and theirs to this one.
func (s *Server) Close() {
	s.stop()
	s.peers.Close()
}

// header fills a response header as etcd does: this member's view.
func (s *Server) header(h *pb.ResponseHeader) *pb.ResponseHeader {
	if h == nil {
		h = &pb.ResponseHeader{Revision: s.req.Rev()}
	}
	v := s.headerOf(h.Revision)
	h.ClusterId, h.MemberId, h.RaftTerm = v.cluster, v.member, v.term
	return h
}

// headerOf is the header of a response at revision rev, as a comparable
// value (the watch encoder keys its cache on it).
func (s *Server) headerOf(rev int64) header {
	cluster, member, term := s.req.HeaderOf(rev)
	return header{cluster: cluster, member: member, term: term, rev: rev}
}

func (s *Server) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.req.WithTimeout(ctx)
}

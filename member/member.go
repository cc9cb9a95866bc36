package member

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/checkpoint"
	"github.com/corenode/corenode/integrity"
	"github.com/corenode/corenode/lease"
	"github.com/corenode/corenode/lessor"
	"github.com/corenode/corenode/node"
	"github.com/corenode/corenode/readlease"
	"github.com/corenode/corenode/server"
	"github.com/corenode/corenode/transport"
	"github.com/corenode/corenode/transport/nameserver"
)

// Member is a running member.
type Member struct {
	cfg     Config
	log     *slog.Logger
	node    *node.Node
	server  *transport.Server
	request *server.Server // the request layer the edge (server) calls
	// readLeases is the leader's read-lease service and write gate.
	readLeases *readlease.Manager
	peerMux    *transport.PeerMux
	clients    []*transport.ClientMux
	grpc       *grpc.Server
	peer       *grpc.Server
	http       *http.Server
	// metricsLns and metricsHTTP serve --listen-metrics-urls.
	metricsLns  []net.Listener
	metricsHTTP *http.Server
	// httpLns serve --listen-client-http-urls; with them, the client
	// URLs' HTTP is httpElsewhere's, served by elsewhere.
	httpLns   []net.Listener
	elsewhere *http.Server
	// pipe carries the JSON gateway's calls into grpc over gwConn.
	pipe   *transport.PipeListener
	gwConn *grpc.ClientConn
	dns    *nameserver.Server // nil without DNS.Addr
	cancel context.CancelFunc
	// ready is closed once the member has published itself to the cluster,
	// caught up with it and would serve a linearizable read (etcd's
	// ReadyNotify).
	ready chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	err   error

	// failed is closed, with failErr, when the member finds at start that
	// it must not serve (the initial corruption check).
	failed  chan struct{}
	failErr error
}

// Start starts a member and returns once it serves; the cluster may still be
// electing a leader.
func Start(cfg Config) (*Member, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.InitialClusterToken == "" {
		cfg.InitialClusterToken = "corenode-cluster"
	}
	logger := cfg.Logger.With("member", cfg.Name)
	logDirPath, err := logDir(cfg.DataDir, cfg.WALDir)
	if err != nil {
		return nil, err
	}
	if _, err := ParseInitialCluster(cfg.InitialCluster); err != nil {
		return nil, err
	}
	// Whether --initial-cluster names this member as it advertises itself
	// matters only to a member that bootstraps a new cluster: a member
	// restarted on its data dir, or moved by etcdctl member update, is not
	// held to the flags it was first started with (as etcd).
	servers, serversErr := initialServers(cfg.Name, cfg.InitialCluster, cfg.InitialClusterToken, cfg.InitialAdvertisePeerURLs)
	advPeer, err := hostPort(cfg.InitialAdvertisePeerURLs[0])
	if err != nil {
		return nil, fmt.Errorf("--initial-advertise-peer-urls: %w", err)
	}
	var bootstrap bool
	switch cfg.InitialClusterState {
	case "", "new":
		bootstrap = true
	case "existing":
	default:
		return nil, fmt.Errorf("--initial-cluster-state must be new or existing, not %q", cfg.InitialClusterState)
	}

	validity := cmp.Or(cfg.SelfSignedCertValidity, 1)
	if cfg.ClientTLS, err = cfg.ClientTLS.withAutoTLS(autoTLSDir(cfg.DataDir, "client"), cfg.ListenClientURLs, validity, "", logger); err != nil {
		return nil, err
	}
	if cfg.PeerTLS, err = cfg.PeerTLS.withAutoTLS(autoTLSDir(cfg.DataDir, "peer"), cfg.ListenPeerURLs, validity, "peer-", logger); err != nil {
		return nil, err
	}
	clientTLS, err := tlsFor(cfg.ListenClientURLs, cfg.ClientTLS, "", "--listen-client-urls")
	if err != nil {
		return nil, err
	}
	if clientTLS != nil && (cfg.ClientTLS.ClientCertFile != "" || cfg.ClientTLS.ClientKeyFile != "") {
		// etcd presents --client-cert-file/--client-key-file when it dials
		// its own client URLs: its gRPC gateway does, under
		// --client-cert-auth. corenode never dials a client URL (its
		// gateway calls the server in process, over a pipe), so nothing
		// presents them; they are loaded and checked all the same, as the
		// dialing side's configuration, so that a flag carried over from
		// etcd names a pair that works there too, and a wrong one stops
		// the start here, by name.
		if _, err := cfg.ClientTLS.clientConfig(""); err != nil {
			return nil, err
		}
	}
	peerTLS, err := tlsFor(cfg.ListenPeerURLs, cfg.PeerTLS, "peer-", "--listen-peer-urls")
	if err != nil {
		return nil, err
	}
	// etcd bounds a peer dial at 1 s plus the election timeout
	// (PeerDialTimeout); so does corenode its raft dials.
	peerCfg := transport.PeerConfig{Advertise: advPeer, ServerTLS: peerTLS, RaftDialTimeout: time.Second + cmp.Or(cfg.ElectionTimeout, time.Second)}
	if peerTLS != nil {
		if peerCfg.ClientTLS, err = cfg.PeerTLS.clientConfig("peer-"); err != nil {
			return nil, err
		}
	}
	for _, u := range cfg.InitialAdvertisePeerURLs {
		if isHTTPS(u) != (peerTLS != nil) {
			return nil, fmt.Errorf("--initial-advertise-peer-urls %s and --listen-peer-urls must use the same scheme", u)
		}
	}

	m := &Member{cfg: cfg, log: logger}
	ok := false
	defer func() {
		if !ok {
			m.closeListeners()
		}
	}()
	peerLn := cfg.PeerListener
	if peerLn == nil {
		if len(cfg.ListenPeerURLs) == 0 {
			return nil, errors.New("--listen-peer-urls is empty")
		}
		hp, err := hostPort(cfg.ListenPeerURLs[0])
		if err != nil {
			return nil, fmt.Errorf("--listen-peer-urls: %w", err)
		}
		if peerLn, err = cfg.SocketOpts.listen(hp); err != nil {
			return nil, fmt.Errorf("listen for peers: %w", err)
		}
	}
	peerCfg.LocalIP = localIP(peerLn)
	if cfg.PeerLocalAddrFromAdvertise {
		if ip := advertisedIP(cfg.InitialAdvertisePeerURLs); ip != nil {
			peerCfg.LocalIP = ip
		}
	}
	if m.peerMux, err = transport.NewPeerMux(peerLn, peerCfg, logger); err != nil {
		peerLn.Close()
		return nil, err
	}
	clientLns := cfg.ClientListeners
	if clientLns == nil {
		for _, u := range cfg.ListenClientURLs {
			ln, err := cfg.SocketOpts.listenURL(u)
			if err != nil {
				return nil, fmt.Errorf("--listen-client-urls: %w", err)
			}
			clientLns = append(clientLns, ln)
		}
	}
	for _, ln := range clientLns {
		m.clients = append(m.clients, transport.NewClientMux(ln, clientTLS, logger))
	}
	if m.metricsLns, err = listenHTTP(cfg, cfg.ListenMetricsURLs, "--listen-metrics-urls"); err != nil {
		return nil, err
	}
	if m.httpLns, err = listenHTTP(cfg, cfg.ListenClientHTTPURLs, "--listen-client-http-urls"); err != nil {
		return nil, err
	}

	m.pipe = transport.NewPipeListener()
	if m.gwConn, err = transport.DialGateway(m.pipe); err != nil {
		return nil, err
	}
	gateway, err := transport.NewGateway(m.gwConn)
	if err != nil {
		return nil, err
	}

	tracker := lease.NewTracker(cfg.leaseClock(), lease.TrackerConfig{CheckpointAfter: cfg.LeaseCheckpointAfter})
	// The raft handshake states and judges this member's history from the
	// first connection raft makes (node/fence.go).
	fence := node.NewFence(logger)
	m.peerMux.SetIdentity(fence)
	m.node, err = node.New(node.Config{
		Fence:                  fence,
		LeaseObserver:          tracker,
		Name:                   cfg.Name,
		DataDir:                cfg.DataDir,
		LogDir:                 logDirPath,
		ID:                     node.MemberID(cfg.InitialAdvertisePeerURLs, cfg.InitialClusterToken),
		ResolveID:              func() (uint64, error) { return joinedID(m.peerMux, cfg, cmp.Or(cfg.ElectionTimeout, time.Second)) },
		ClusterToken:           cfg.InitialClusterToken,
		StrictReconfigCheck:    cfg.StrictReconfigCheck,
		MaxLearners:            cfg.MaxLearners,
		PeerURLs:               cfg.InitialAdvertisePeerURLs,
		ClientURLs:             cfg.AdvertiseClientURLs,
		Transport:              m.peerMux.RaftTransport(logger),
		Bootstrap:              bootstrap,
		ForceNewCluster:        cfg.ForceNewCluster,
		InitialMembers:         servers,
		InitialMembersErr:      serversErr,
		HeartbeatInterval:      cfg.HeartbeatInterval,
		ElectionTimeout:        cfg.ElectionTimeout,
		CommitNotify:           cfg.CommitNotifyInterval,
		SnapshotCount:          cfg.SnapshotCount,
		SnapshotCatchUpEntries: cfg.SnapshotCatchUpEntries,
		MaxSnapshots:           cfg.MaxSnapshots,
		LogStore:               cfg.LogStore,
		UnsafeNoFsync:          cfg.UnsafeNoFsync,
		Logger:                 logger,
		RaftLog:                cfg.RaftLog,
		Metrics:                cfg.Metrics,
		Auth:                   auth.New(auth.Config{Tokens: cfg.AuthTokens, TokenTTL: cfg.AuthTokenTTL, BcryptCost: cfg.BcryptCost}),
		LogVerifyInterval:      cfg.LogVerifyInterval,
	})
	if err != nil {
		return nil, err
	}
	quota := cfg.QuotaBackendBytes
	if quota == 0 {
		quota = DefaultQuotaBackendBytes
	}
	peers := transport.NewPeerClient(m.peerMux, cfg.ElectionTimeout)
	m.request = server.New(m.node, peers, transport.Callers{Auth: m.node.FSM().Auth()}, server.Config{
		Limits:          server.Limits{MaxRequestBytes: cfg.MaxRequestBytes, MaxTxnOps: cfg.MaxTxnOps, QuotaBackendBytes: quota},
		ElectionTimeout: cfg.ElectionTimeout,
		Log:             logger,
	})
	m.server = transport.NewServer(m.request, peers, logger)
	m.server.SetWatchProgressNotifyInterval(cfg.WatchProgressNotify)
	m.node.SetPeerAges(m.server)
	sched := checkpoint.New(tracker, proposer{m.node}, checkpoint.Config{Tick: cfg.LeaseTick, MaxBatch: cfg.LeaseBatch},
		checkpoint.NewMetrics(cfg.Metrics), logger)
	m.node.AddLeaderService(sched)
	if cfg.CorruptCheckTime > 0 {
		m.node.AddLeaderService(integrity.New(integrityCluster{m.node, m.request}, cfg.CorruptCheckTime, logger))
	}
	m.request.SetLessor(lessor.New(lessor.Config{Tracker: tracker, Scheduler: sched, State: m.node.FSM(),
		Barrier: m.node.ReadBarrier, Proposer: m.request.LeaseProposer(), MinTTL: MinTTL(cfg.ElectionTimeout), Metrics: cfg.Metrics}))
	if cfg.AutoCompaction.Periodic > 0 || cfg.AutoCompaction.Revisions > 0 {
		m.node.AddLeaderService(newAutoCompactor(cfg.AutoCompaction, m, logger))
	}
	m.readLeases = readlease.New(readLeaseConfig(cfg, logger), m.node)
	m.node.AddLeaderService(m.readLeases)
	m.node.SetGate(m.readLeases)
	m.request.SetReadLeases(m.readLeases)
	if cfg.Metrics != nil {
		f := m.node.FSM()
		cfg.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corenode_lease_live", Help: "Live leases."},
			func() float64 { return float64(f.LeaseCount()) }))
		cfg.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corenode_kv_revision", Help: "Current revision."},
			func() float64 { return float64(f.Store().Rev()) }))
		cfg.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corenode_kv_keys", Help: "Live keys."},
			func() float64 { return float64(f.Store().KeyCount()) }))
		cfg.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corenode_kv_watchers", Help: "Registered watchers, over every watch stream."},
			func() float64 { return float64(f.Store().WatcherCount()) }))
		cfg.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corenode_kv_size_bytes", Help: "State the space quota counts: keys and values of every kept revision plus a fixed overhead each."},
			func() float64 { return float64(f.Store().Size()) }))
		cfg.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corenode_quota_backend_bytes", Help: "The space quota (--quota-backend-bytes); 0 means none."},
			func() float64 { return float64(max(quota, 0)) }))
		cfg.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corenode_alarms_active", Help: "Raised alarms (NOSPACE, ...), over every member."},
			func() float64 { return float64(len(f.Alarms())) }))
	}
	m.node.Start()

	maxRecv := cfg.MaxRequestBytes
	if maxRecv == 0 {
		maxRecv = 1536 * 1024
	}
	opts := []grpc.ServerOption{
		// As etcd: room for the request plus gRPC framing, so an oversized
		// request gets etcd's "request is too large" from our own check.
		grpc.MaxRecvMsgSize(maxRecv + 512*1024),
		// As etcd: an answer of any size is sent (a Range of every key with
		// its value can pass 64 MiB); clientv3 accepts up to 2 GiB by default.
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(cmp.Or(cfg.MaxConcurrentStreams, 1<<20)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cmp.Or(cfg.GRPCKeepalive.MinTime, 5*time.Second), PermitWithoutStream: true}),
	}
	if ka := keepaliveParams(cfg.GRPCKeepalive); ka != nil {
		opts = append(opts, grpc.KeepaliveParams(*ka))
	}
	opts = append(opts, transport.ServerOptions()...)
	opts = append(opts, cfg.GRPCServerOptions...)
	if cfg.WarningUnaryRequestDuration > 0 || cfg.WarningApplyDuration > 0 {
		opts = append(opts, slowRequests(cfg.WarningUnaryRequestDuration, cfg.WarningApplyDuration, logger))
	}
	if cfg.Metrics != nil {
		opts = append(opts, transport.NewGRPCMetrics(cfg.Metrics).ServerOptions()...)
		m.request.RegisterAuthMetrics(cfg.Metrics)
	}
	// Inside the metrics' interceptors, so they count etcd's codes.
	opts = append(opts, transport.ErrorOptions()...)
	opts = append(opts, m.server.CatchUpOptions()...)
	opts = append(opts, m.server.AuthOptions(cfg.ClientTLS.ClientCertAuth)...)
	m.grpc = grpc.NewServer(opts...)
	m.server.Register(m.grpc)
	// Forwarded calls answer in etcd's words too: the member that forwarded
	// one decides on them (not leader: send it again) and relays them.
	m.peer = grpc.NewServer(append(transport.ErrorOptions(), transport.PeerServerOptions()...)...)
	m.server.RegisterPeer(m.peer)
	gatherer := cfg.Gatherer
	if g, ok := cfg.Metrics.(prometheus.Gatherer); ok && gatherer == nil {
		gatherer = g
	}
	m.http = &http.Server{Handler: accessControl(storageHealth(m.node, m.server.HTTPHandler(gatherer, cfg.EnablePprof, gateway)),
		cfg.CORS, cfg.HostWhitelist, logger), ReadHeaderTimeout: 10 * time.Second, ErrorLog: httpErrorLog(logger)}
	m.serve(func() error { return m.grpc.Serve(m.pipe) })

	m.serve(func() error { return m.peer.Serve(m.peerMux.GRPCListener()) })
	m.serve(func() error { return m.server.ServeProposalConns(m.peerMux.ProposalListener()) })
	clientHTTP := m.http
	if len(m.httpLns) > 0 {
		m.elsewhere = &http.Server{Handler: httpElsewhere, ReadHeaderTimeout: 10 * time.Second, ErrorLog: httpErrorLog(logger)}
		clientHTTP = m.elsewhere
		for _, ln := range m.httpLns {
			m.serve(func() error { return m.http.Serve(ln) })
		}
	}
	for _, c := range m.clients {
		m.serve(func() error { return m.grpc.Serve(c.GRPC()) })
		m.serve(func() error { return clientHTTP.Serve(c.HTTP()) })
	}
	if len(m.metricsLns) > 0 {
		m.metricsHTTP = &http.Server{Handler: metricsOnly(m.http.Handler), ReadHeaderTimeout: 10 * time.Second, ErrorLog: httpErrorLog(logger)}
		for _, ln := range m.metricsLns {
			m.serve(func() error { return m.metricsHTTP.Serve(ln) })
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.ready = make(chan struct{})
	m.failed = make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if m.request.PublishSelf(ctx) != nil {
			return
		}
		select {
		case <-m.node.CaughtUp():
		case <-ctx.Done():
			return
		}
		if cfg.InitialCorruptCheck {
			if err := initialCheck(ctx, integrityCluster{m.node, m.request}, logger); err != nil {
				if ctx.Err() == nil {
					logger.Error("initial corruption check failed", "err", err)
					m.failErr = err
					close(m.failed)
				}
				return
			}
		}
		// etcd logs the line below once its publish entry committed,
		// which it proposes at every start: a leader held a quorum then,
		// and its gRPC health is SERVING from there on. A restarted member
		// whose attributes are already in the table proposes nothing, so
		// it waits here until it would serve a linearizable read (the
		// health service's verdict), or a harness that asks the health
		// right after the line (etcd's robustness suite) hears NOT_SERVING.
		if !m.awaitServing(ctx) {
			return
		}
		// etcd's words: its e2e framework and scripts written for etcd
		// wait for this line.
		logger.Info("ready to serve client requests")
		close(m.ready)
	}()
	ok = true
	if err := m.startDNS(ctx); err != nil {
		m.Close()
		return nil, err
	}
	logger.Info("serving", "client", m.ClientAddrs(), "metrics", m.MetricsAddrs(), "peer", peerLn.Addr().String(), "data-dir", cfg.DataDir, "log-store", m.node.LogStore(),
		"auth-token", cfg.AuthTokens.String(), "id", fmt.Sprintf("%x", m.node.ID()))
	return m, nil
}

func (m *Member) serve(f func() error) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := f(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) &&
			!errors.Is(err, grpc.ErrServerStopped) {
			m.log.Error("server stopped", "err", err)
		}
	}()
}

// awaitServing returns true once the member would serve a linearizable
// read (server.Serving), false if ctx ended first. It asks again after each
// leader change, or every 50 ms while none comes.
func (m *Member) awaitServing(ctx context.Context) bool {
	for {
		change := m.node.LeaderChange()
		if m.request.Serving(ctx) == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-change:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Ready is closed once the member serves as a full member of the cluster:
// it has published its name and client URLs through raft, holds what
// the cluster had committed when it started, and would serve a
// linearizable read (a leader holds a quorum), as etcd's ReadyNotify.
func (m *Member) Ready() <-chan struct{} { return m.ready }

// Failed is closed when the member found at start that it must not
// serve; Err says why. The command stops the member then, as etcd exits.
func (m *Member) Failed() <-chan struct{} { return m.failed }

// Err is why Failed was closed.
func (m *Member) Err() error {
	select {
	case <-m.failed:
		return m.failErr
	default:
		return nil
	}
}

// Removed is closed when the cluster has removed this member; the process
// should then Close it and exit.
func (m *Member) Removed() <-chan struct{} { return m.node.Removed() }

// Halted is closed when this member found it holds another history than
// its cluster's; HaltErr says what and how to recover. The process should
// then Close it and exit.
func (m *Member) Halted() <-chan struct{} { return m.node.Halted() }

// HaltErr is why Halted was closed.
func (m *Member) HaltErr() error { return m.node.HaltErr() }

// Node is the member's node.
func (m *Member) Node() *node.Node { return m.node }

// ID is the member's ID.
func (m *Member) ID() uint64 { return m.node.ID() }

// PeerAddr is the bound peer address.
func (m *Member) PeerAddr() string { return m.peerMux.Addr().String() }

// ClientAddrs are the bound client addresses.
func (m *Member) ClientAddrs() []string {
	var out []string
	for _, c := range m.clients {
		out = append(out, c.GRPC().Addr().String())
	}
	return out
}

// MetricsAddrs are the bound --listen-metrics-urls addresses.
func (m *Member) MetricsAddrs() []string {
	var out []string
	for _, ln := range m.metricsLns {
		out = append(out, ln.Addr().String())
	}
	return out
}

func (m *Member) closeListeners() {
	if m.peerMux != nil {
		m.peerMux.Close()
	}
	for _, c := range m.clients {
		c.Close()
	}
	for _, ln := range slices.Concat(m.metricsLns, m.httpLns) {
		ln.Close()
	}
}

// Close stops the member: client traffic stops first (a graceful stop of
// at most 2 s), then the node, which, as leader, hands leadership over
// before raft shuts down.
func (m *Member) Close() error {
	m.once.Do(func() {
		m.cancel()
		if m.dns != nil {
			m.dns.Close()
		}
		m.closeListeners()
		stopped := make(chan struct{})
		go func() {
			m.grpc.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			// Watch streams never end by themselves.
			m.grpc.Stop()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m.http.Shutdown(ctx)
		for _, h := range []*http.Server{m.metricsHTTP, m.elsewhere} {
			if h != nil {
				h.Shutdown(ctx)
			}
		}
		cancel()
		m.gwConn.Close()
		m.pipe.Close()
		m.err = m.node.Close()
		m.peer.Stop()
		m.server.Close()
		m.wg.Wait()
	})
	return m.err
}

// storageHealth answers /health for a member that cannot persist its raft
// state as etcd answers for an unhealthy member, {"health":"false",
// "reason":...} with 503, and passes every other request to next. It
// answers at once: the transport's own check would wait out its deadline
// for an index this member cannot reach, and then give a reason that does
// not say why.
func storageHealth(n *node.Node, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := n.StorageErr()
		if r.URL.Path != "/health" || err == nil {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(struct {
			Health string `json:"health"`
			Reason string `json:"reason"`
		}{"false", "DISK " + err.Error()})
	})
}

// localIP is the address peer connections are dialed from: the one the peer
// listener is bound to, unless it listens on every address.
// advertisedIP is the IP of the first URL, if its host is one and a
// specific one, as etcd's SetMemberLocalAddr takes it.
func advertisedIP(urls []string) net.IP {
	if len(urls) == 0 {
		return nil
	}
	hp, err := hostPort(urls[0])
	if err != nil {
		return nil
	}
	host, _, _ := net.SplitHostPort(hp)
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() {
		return nil
	}
	return ip
}

func localIP(ln net.Listener) net.IP {
	a, ok := ln.Addr().(*net.TCPAddr)
	if !ok || a.IP.IsUnspecified() {
		return nil
	}
	return a.IP
}

// httpErrorLog is where the member's HTTP servers log a client's failed
// TLS handshake or malformed request: the member's own log, one format per
// member, at debug level. Left to net/http they would go to Go's standard
// log, plain text on stderr beside the member's JSON; etcd discards them
// ("do not log user error").
func httpErrorLog(logger *slog.Logger) *log.Logger {
	return slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
}

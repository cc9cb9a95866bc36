package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/grpclog"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/logstore"
	"github.com/corenode/corenode/member"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "health":
			os.Exit(health(os.Args[2:]))
		case "snapshot":
			os.Exit(snapshot(os.Args[2:]))
		case "lock", "elect":
			os.Exit(hold(os.Args[1], os.Args[2:]))
		case "register":
			os.Exit(register(os.Args[2:]))
		case watchdogArg:
			os.Exit(runWatchdog(os.Args[2:]))
		case "version", "--version":
			printVersion(os.Stdout)
			return
		}
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "corenode:", err)
		os.Exit(1)
	}
}

func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// run parses the flags, starts a member and waits for a signal or its
// removal from the cluster.
func run(args []string) error {
	s, err := parseFlags(args, os.Environ())
	if errors.Is(err, flag.ErrHelp) {
		printMemberUsage(os.Stdout)
		return nil
	}
	if err != nil {
		return err
	}
	if s.o.printVersion {
		printVersion(os.Stdout)
		return nil
	}
	m, logger, closeLog, err := start(s, prometheus.DefaultRegisterer, func(l *slog.Logger) {
		// Before any gRPC call: grpclog's setter is not synchronized.
		grpclog.SetLoggerV2(grpcLogger{l})
	})
	if err != nil {
		return err
	}
	defer closeLog()
	gcCtx, stopGC := context.WithCancel(context.Background())
	defer stopGC()
	go tuneGC(gcCtx, logger)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		logger.Info("stopping", "signal", s.String())
		return m.Close()
	case <-m.Failed():
		m.Close()
		return m.Err()
	case <-m.Removed():
		m.Close()
		return errors.New("this member was removed from the cluster (etcdctl member remove); " +
			"to rejoin, remove its data dir and add it again")
	}
}

// start makes the logger the flags ask for, logs the warnings parsing
// gathered, and starts the member; closeLog closes the log files.
func start(s *settings, metrics prometheus.Registerer, withLogger func(*slog.Logger)) (m *member.Member, logger *slog.Logger, closeLog func(), err error) {
	var rotate *rotation
	if s.o.logRotation {
		r, err := parseRotation(s.o.logRotationJSON)
		if err != nil {
			return nil, nil, nil, err
		}
		rotate = &r
	}
	logger, closeLog, err = newLogger(s.o.logger, s.o.logFormat, s.o.logLevel, s.o.logOutputs, rotate)
	if err != nil {
		return nil, nil, nil, err
	}
	slog.SetDefault(logger)
	if withLogger != nil {
		withLogger(logger)
	}
	s.logWarnings(logger)
	cfg, err := memberConfig(&s.o, logger)
	if err == nil {
		cfg.Metrics = metrics
		m, err = member.Start(cfg)
	}
	if err != nil {
		// run prints err: one line, where an operator looks first.
		closeLog()
		return nil, nil, nil, err
	}
	return m, logger, closeLog, nil
}

// memberConfig checks the options and turns them into a member's Config.
func memberConfig(o *options, logger *slog.Logger) (member.Config, error) {
	if o.dataDir == "" {
		o.dataDir = o.name + ".corenode"
	}
	if o.discoverySRV != "" && len(o.discovery.endpoints) > 0 || (o.discoverySRV != "" || len(o.discovery.endpoints) > 0) && o.initialCluster != "" {
		// As etcd: each names the initial cluster.
		return member.Config{}, errors.New("choose one of --initial-cluster, --discovery-endpoints or --discovery-srv")
	}
	if len(o.discovery.endpoints) > 0 {
		ic := o.name + "=" + strings.Join(o.advertisePeer, ",")
		if !hasRaftLog(o.dataDir) {
			var err error
			if ic, err = v3Discovery(context.Background(), o.discovery, o.name, o.initialToken, o.advertisePeer, logger); err != nil {
				return member.Config{}, err
			}
		}
		o.initialCluster = ic
	}
	if o.discoverySRV != "" {
		ic, err := srvCluster(context.Background(), net.DefaultResolver, o.discoverySRV, o.discoverySRVName, o.name, o.advertisePeer, logger)
		if err != nil {
			return member.Config{}, err
		}
		o.initialCluster = ic
	}
	if o.initialCluster == "" {
		o.initialCluster = o.name + "=" + strings.Join(o.advertisePeer, ",")
	}
	if o.commitNotifyMS == 0 {
		o.commitNotifyMS = min(50, o.heartbeatMS)
	}
	if o.commitNotifyMS < 1 || o.commitNotifyMS > o.heartbeatMS {
		return member.Config{}, fmt.Errorf("--commit-notify-interval (%d ms) must be between 1 and --heartbeat-interval (%d ms)", o.commitNotifyMS, o.heartbeatMS)
	}
	if o.readLease < 0 {
		return member.Config{}, fmt.Errorf("--read-lease-duration (%s) must not be negative", o.readLease)
	}
	if o.readLeaseMaxKeys <= 0 || o.readLeaseMaxHolders <= 0 {
		return member.Config{}, fmt.Errorf("--read-lease-max-keys (%d) and --read-lease-max-holders-per-key (%d) must be positive", o.readLeaseMaxKeys, o.readLeaseMaxHolders)
	}
	tokens, err := auth.ParseTokenKind(o.authToken)
	if err != nil {
		return member.Config{}, err
	}
	o.authTokens = tokens
	if o.authTokenTTL <= 0 {
		return member.Config{}, fmt.Errorf("--auth-token-ttl (%d) must be positive", o.authTokenTTL)
	}
	if !auth.ValidBcryptCost(o.bcryptCost) {
		return member.Config{}, fmt.Errorf("--bcrypt-cost (%d) must be between 4 and 31", o.bcryptCost)
	}
	if o.compactHashCheck && o.corruptCheck == 0 {
		if o.compactHashCheckTime <= 0 {
			return member.Config{}, fmt.Errorf("--compact-hash-check-time (%s) must be positive", o.compactHashCheckTime)
		}
		o.corruptCheck = o.compactHashCheckTime
	}
	if len(o.listenPeer) > 1 {
		logger.Warn("corenode listens for peers on one URL: the first --listen-peer-urls; the others are not listened on",
			"listening", o.listenPeer[0], "not-listening", o.listenPeer[1:])
	}
	if o.corruptCheck < 0 {
		return member.Config{}, fmt.Errorf("--corrupt-check-time (%s) must not be negative", o.corruptCheck)
	}
	if o.watchProgressNotify <= 0 {
		return member.Config{}, fmt.Errorf("--watch-progress-notify-interval (%s) must be positive", o.watchProgressNotify)
	}
	if o.maxLearners < 1 {
		return member.Config{}, fmt.Errorf("--max-learners (%d) must be at least 1", o.maxLearners)
	}
	if o.selfSignedCertValidity < 1 {
		return member.Config{}, fmt.Errorf("--self-signed-cert-validity (%d) must be at least 1 (year)", o.selfSignedCertValidity)
	}
	if o.electionMS < 5*o.heartbeatMS {
		return member.Config{}, fmt.Errorf("--election-timeout (%d ms) should be at least 5 times --heartbeat-interval (%d ms)", o.electionMS, o.heartbeatMS)
	}
	if o.snapshotCount < 1 {
		return member.Config{}, fmt.Errorf("--snapshot-count (%d) must be positive", o.snapshotCount)
	}
	if o.maxConcurrentStreams < 1 || o.maxConcurrentStreams > math.MaxUint32 {
		return member.Config{}, fmt.Errorf("--max-concurrent-streams (%d) must be between 1 and %d", o.maxConcurrentStreams, uint32(math.MaxUint32))
	}
	if o.metrics != "basic" && o.metrics != "extensive" {
		return member.Config{}, fmt.Errorf("--metrics %q: want basic or extensive", o.metrics)
	}
	if err := tlsPolicy(o); err != nil {
		return member.Config{}, err
	}
	compaction, err := autoCompaction(o.autoCompactionMode, o.autoCompactionRetention)
	if err != nil {
		return member.Config{}, err
	}
	keepalive := member.GRPCKeepalive{MinTime: o.keepaliveMinTime, Interval: o.keepaliveInterval, Timeout: o.keepaliveTimeout}
	// etcd's 0 turns the pings off; the config's 0 is the default.
	if keepalive.Interval == 0 {
		keepalive.Interval = -1
	}
	if keepalive.Timeout == 0 {
		keepalive.Timeout = -1
	}
	if keepalive.MinTime <= 0 {
		return member.Config{}, fmt.Errorf("--grpc-keepalive-min-time (%s) must be positive", keepalive.MinTime)
	}
	return member.Config{
		Name:                        o.name,
		DataDir:                     o.dataDir,
		WALDir:                      o.walDir,
		ListenClientURLs:            o.listenClient,
		AdvertiseClientURLs:         o.advertiseClient,
		ListenPeerURLs:              o.listenPeer,
		InitialAdvertisePeerURLs:    o.advertisePeer,
		InitialCluster:              o.initialCluster,
		InitialClusterState:         o.initialState,
		InitialClusterToken:         o.initialToken,
		StrictReconfigCheck:         o.strictReconfigCheck,
		MaxLearners:                 o.maxLearners,
		HeartbeatInterval:           time.Duration(o.heartbeatMS) * time.Millisecond,
		ElectionTimeout:             time.Duration(o.electionMS) * time.Millisecond,
		CommitNotifyInterval:        time.Duration(o.commitNotifyMS) * time.Millisecond,
		SnapshotCount:               uint64(o.snapshotCount),
		LogStore:                    o.logStore,
		MaxRequestBytes:             o.maxRequestBytes,
		MaxTxnOps:                   o.maxTxnOps,
		MaxConcurrentStreams:        uint32(o.maxConcurrentStreams),
		GRPCKeepalive:               keepalive,
		EnablePprof:                 o.enablePprof,
		Logger:                      logger,
		ListenMetricsURLs:           o.listenMetrics,
		ListenClientHTTPURLs:        o.listenClientHTTP,
		SocketOpts:                  o.socketOpts,
		CORS:                        o.cors,
		HostWhitelist:               o.hostWhitelist,
		WarningUnaryRequestDuration: o.warnUnary,
		WarningApplyDuration:        o.warnApply,
		LeaseCheckpointAfter:        time.Duration(o.leaseCheckpointMS) * time.Millisecond,
		LeaseTick:                   time.Duration(o.leaseTickMS) * time.Millisecond,
		LeaseBatch:                  o.leaseBatch,
		WatchProgressNotify:         o.watchProgressNotify,
		QuotaBackendBytes:           int64(o.quotaBackendBytes),
		AuthTokens:                  o.authTokens,
		AuthTokenTTL:                time.Duration(o.authTokenTTL) * time.Second,
		BcryptCost:                  o.bcryptCost,
		CorruptCheckTime:            o.corruptCheck,
		AutoCompaction:              compaction,
		InitialCorruptCheck:         o.initialCorruptCheck,
		PeerLocalAddrFromAdvertise:  o.setMemberLocalAddr,
		ReadLeaseDuration:           cmp.Or(o.readLease, -1), // the flag's 0 is none; the config's is the default
		ReadLeaseMaxKeys:            o.readLeaseMaxKeys,
		ReadLeaseMaxHoldersPerKey:   o.readLeaseMaxHolders,
		ClientTLS:                   o.clientTLS,
		PeerTLS:                     o.peerTLS,
		SelfSignedCertValidity:      uint(o.selfSignedCertValidity),
		DNS:                         o.dns,
	}, nil
}

// autoCompaction reads etcd's --auto-compaction-mode and -retention: in
// periodic mode a duration, hours when it has no unit; in revision mode a
// count of revisions.
func autoCompaction(mode, retention string) (member.AutoCompaction, error) {
	switch mode {
	case "periodic":
		if h, err := strconv.ParseInt(retention, 10, 64); err == nil {
			if h < 0 {
				return member.AutoCompaction{}, fmt.Errorf("--auto-compaction-retention %q must not be negative", retention)
			}
			return member.AutoCompaction{Periodic: time.Duration(h) * time.Hour}, nil
		}
		d, err := time.ParseDuration(retention)
		if err != nil || d < 0 {
			return member.AutoCompaction{}, fmt.Errorf("--auto-compaction-retention %q: want a duration (such as 1h, 30m) or a number of hours", retention)
		}
		return member.AutoCompaction{Periodic: d}, nil
	case "revision":
		n, err := strconv.ParseInt(retention, 10, 64)
		if err != nil || n < 0 {
			return member.AutoCompaction{}, fmt.Errorf("--auto-compaction-retention %q: want a number of revisions in revision mode", retention)
		}
		return member.AutoCompaction{Revisions: n}, nil
	}
	return member.AutoCompaction{}, fmt.Errorf("--auto-compaction-mode %q: want periodic or revision", mode)
}

// tlsPolicy sets the TLS versions and cipher suites, etcd's names, on
// both TLS settings.
func tlsPolicy(o *options) error {
	versions := map[string]uint16{"": 0, "TLS1.2": tls.VersionTLS12, "TLS1.3": tls.VersionTLS13}
	lo, ok := versions[o.tlsMinVersion]
	if !ok || lo == 0 && o.tlsMinVersion != "" {
		return fmt.Errorf("--tls-min-version %q: want TLS1.2 or TLS1.3", o.tlsMinVersion)
	}
	hi, ok := versions[o.tlsMaxVersion]
	if !ok {
		return fmt.Errorf("--tls-max-version %q: want TLS1.2, TLS1.3 or nothing", o.tlsMaxVersion)
	}
	if hi != 0 && hi < lo {
		return fmt.Errorf("--tls-max-version %s is below --tls-min-version %s", o.tlsMaxVersion, o.tlsMinVersion)
	}
	var suites []uint16
	if len(o.cipherSuites) > 0 {
		if lo == tls.VersionTLS13 {
			// As etcd: TLS 1.3's suites cannot be chosen.
			return errors.New("--cipher-suites cannot be used with --tls-min-version TLS1.3")
		}
		byName := map[string]uint16{}
		for _, c := range tls.CipherSuites() {
			byName[c.Name] = c.ID
		}
		for _, n := range o.cipherSuites {
			id, ok := byName[n]
			if !ok {
				return fmt.Errorf("--cipher-suites: %q is no TLS 1.2 cipher suite Go considers secure", n)
			}
			suites = append(suites, id)
		}
	}
	for _, t := range []*member.TLSInfo{&o.clientTLS, &o.peerTLS} {
		t.MinVersion, t.MaxVersion, t.CipherSuites = lo, hi, suites
	}
	return nil
}

// health asks a member's /health endpoint; it is the container health check,
// so it needs no shell and no etcdctl.
func health(args []string) int {
	fs := flag.NewFlagSet("corenode health", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "http://127.0.0.1:2379", "client URL of the member to check")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	cacert := fs.String("cacert", "", "CA bundle to verify an https:// endpoint")
	cert := fs.String("cert", "", "client certificate, for members that require one")
	key := fs.String("key", "", "client key, with --cert")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	client, err := healthClient(*cacert, *cert, *key)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corenode health:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(*endpoint, "/")+"/health", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corenode health:", err)
		return 2
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corenode health:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		fmt.Fprintf(os.Stderr, "corenode health: %s unhealthy: %s\n", *endpoint, strings.TrimSpace(string(body)))
		return 1
	}
	fmt.Printf("%s is healthy\n", *endpoint)
	return 0
}

// healthClient is an HTTP client that trusts cacert and presents cert/key
// when given, so the health check works against TLS members too.
func healthClient(cacert, cert, key string) (*http.Client, error) {
	if cacert == "" && cert == "" && key == "" {
		return http.DefaultClient, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificates in it", cacert)
		}
	}
	if cert != "" || key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}

// snapshot implements `corenode snapshot restore`, etcdutl's restore for
// files that `etcdctl snapshot save` wrote from an etcd or corenode member.
func snapshot(args []string) int {
	usage := "usage: corenode snapshot restore FILE --name NAME --data-dir DIR --initial-cluster NAME=URL,... " +
		"--initial-advertise-peer-urls URL [--initial-cluster-token TOKEN] [--skip-hash-check]"
	if len(args) == 0 || args[0] != "restore" {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	args = args[1:]
	var file string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		file, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("corenode snapshot restore", flag.ContinueOnError)
	name := fs.String("name", "default", "name of the member this data dir is for")
	dataDir := fs.String("data-dir", "", "directory to create (default \"${name}.corenode\"); must not exist or be empty")
	initialCluster := fs.String("initial-cluster", "", "the new cluster, name=peer-url,... (default \"${name}=${initial-advertise-peer-urls}\")")
	token := fs.String("initial-cluster-token", "corenode-cluster", "token of the new cluster")
	advertise := fs.String("initial-advertise-peer-urls", "http://127.0.0.1:2380", "this member's peer URL in the new cluster")
	logStore := fs.String("log-store", logstore.Default, "raft log store to create, "+logstore.WAL+" or "+logstore.BoltDB+"; the member started on the data dir keeps it")
	skipHashCheck := fs.Bool("skip-hash-check", false, "restore a file without the SHA-256 a snapshot ends with (an etcd member's member/snap/db), unchecked")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if file == "" && fs.NArg() > 0 {
		file = fs.Arg(0)
	}
	if file == "" {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	if *dataDir == "" {
		*dataDir = *name + ".corenode"
	}
	if *initialCluster == "" {
		*initialCluster = *name + "=" + *advertise
	}
	stats, err := member.Restore(member.RestoreConfig{
		SnapshotFile: file, Name: *name, DataDir: *dataDir, InitialCluster: *initialCluster,
		InitialClusterToken: *token, InitialAdvertisePeerURLs: splitURLs(*advertise), LogStore: *logStore, SkipHashCheck: *skipHashCheck,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "corenode snapshot restore:", err)
		return 1
	}
	fmt.Printf("restored %s (%s snapshot) into %s: revision %d, %d keys, %d leases\n", file, stats.Format, *dataDir, stats.Revision, stats.Keys, stats.Leases)
	return 0
}

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
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/logstore"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/node"
	"github.com/corenode/corenode/transport"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

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
			fmt.Println("corenode", version)
			return
		}
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "corenode:", err)
		os.Exit(1)
	}
}

type options struct {
	name, dataDir                              string
	listenClient, advertiseClient              string
	listenPeer, advertisePeer                  string
	initialCluster, initialState, initialToken string
	heartbeatMS, electionMS, commitNotifyMS    int
	snapshotCount                              uint64
	logStore                                   string
	maxRequestBytes, maxTxnOps                 int
	logLevel                                   string
	leaseCheckpointMS, leaseTickMS             int
	leaseBatch                                 int
	clientTLS, peerTLS                         member.TLSInfo
	enablePprof                                bool
	watchProgressNotify                        time.Duration
	quotaBackendBytes                          int64
	corruptCheck                               time.Duration
	readLease                                  time.Duration
	readLeaseMaxKeys, readLeaseMaxHolders      int
	authToken                                  string
	authTokens                                 auth.TokenKind
	authTokenTTL, bcryptCost                   int
	strictReconfigCheck                        bool
	forceNewCluster                            bool
	selfSignedCertValidity                     uint
	maxLearners                                int
	dns                                        member.DNSConfig
}

func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("corenode", flag.ContinueOnError)
	fs.StringVar(&o.name, "name", "default", "human-readable name for this member")
	fs.StringVar(&o.dataDir, "data-dir", "", "path to the data directory (default \"${name}.corenode\")")
	fs.StringVar(&o.listenClient, "listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to listen on for client traffic (gRPC and HTTP)")
	fs.StringVar(&o.advertiseClient, "advertise-client-urls", "http://127.0.0.1:2379", "comma-separated client URLs to advertise to the rest of the cluster")
	fs.StringVar(&o.listenPeer, "listen-peer-urls", "http://127.0.0.1:2380", "URL to listen on for peer traffic (raft and forwarding)")
	fs.StringVar(&o.advertisePeer, "initial-advertise-peer-urls", "http://127.0.0.1:2380", "this member's peer URL, as the other members reach it")
	fs.StringVar(&o.initialCluster, "initial-cluster", "", "initial cluster configuration, name=peer-url,... (default \"${name}=${initial-advertise-peer-urls}\")")
	fs.StringVar(&o.initialState, "initial-cluster-state", "new", "new to bootstrap a new cluster, existing to join one (after etcdctl member add)")
	fs.StringVar(&o.initialToken, "initial-cluster-token", "corenode-cluster", "cluster token; member IDs derive from it and the peer URLs")
	fs.BoolVar(&o.forceNewCluster, "force-new-cluster", false, "force to create a new one member cluster from this member's data (after losing the quorum for good; every entry in its log is kept, committed or not); remove the flag after that start")
	fs.IntVar(&o.maxLearners, "max-learners", node.DefaultMaxLearners, "most learners (members that receive the log and serve reads but do not vote) the cluster may have")
	fs.IntVar(&o.maxLearners, "experimental-max-learners", node.DefaultMaxLearners, "deprecated: etcd 3.5's name of --max-learners")
	fs.BoolVar(&o.strictReconfigCheck, "strict-reconfig-check", true, "refuse a membership change that could cost the cluster its quorum: adding a voter while fewer members than the new quorum have started, or while the leader has not been connected to every voter for 5 s; removing a voter the rest could not do without")
	fs.IntVar(&o.heartbeatMS, "heartbeat-interval", 100, "time (in milliseconds) of a heartbeat interval")
	fs.IntVar(&o.electionMS, "election-timeout", 1000, "time (in milliseconds) for an election to timeout")
	fs.IntVar(&o.commitNotifyMS, "commit-notify-interval", 0, "time (in milliseconds) between the empty appends an idle leader sends each follower (0: 50, or --heartbeat-interval if lower); followers hear of new commits from the leader within about a millisecond regardless")
	fs.Uint64Var(&o.snapshotCount, "snapshot-count", 10000, "number of committed entries that triggers a snapshot and log truncation")
	fs.StringVar(&o.logStore, "log-store", "", "raft log store, "+logstore.WAL+" or "+logstore.BoltDB+
		" (default: the one the data dir holds; "+logstore.Default+" for a new data dir); a data dir keeps the store it was created with")
	fs.IntVar(&o.maxRequestBytes, "max-request-bytes", 1536*1024, "maximum client request size in bytes")
	fs.IntVar(&o.maxTxnOps, "max-txn-ops", 128, "maximum number of operations in each branch of a txn")
	fs.BoolVar(&o.enablePprof, "enable-pprof", false, "serve Go's runtime profiles under /debug/pprof/ on the client URLs")
	fs.IntVar(&o.leaseCheckpointMS, "lease-checkpoint-after", 1000, "milliseconds a lease goes without keep-alive before the leader checkpoints its remaining TTL; bounds how far a leader change extends it")
	fs.IntVar(&o.leaseTickMS, "lease-tick", 100, "milliseconds between the leader's lease-clock ticks and checkpoint batches")
	fs.IntVar(&o.leaseBatch, "lease-checkpoint-batch", 1000, "most leases in one checkpoint or expiry entry")
	fs.DurationVar(&o.watchProgressNotify, "watch-progress-notify-interval", transport.DefaultProgressNotifyInterval, "how often a watcher that asked for progress notifications hears the current revision when it heard nothing else")
	fs.DurationVar(&o.watchProgressNotify, "experimental-watch-progress-notify-interval", transport.DefaultProgressNotifyInterval, "deprecated: etcd 3.5's name of --watch-progress-notify-interval")
	fs.Int64Var(&o.quotaBackendBytes, "quota-backend-bytes", 0, "space quota of the state in bytes (0: 2 GiB, as etcd; negative: none); past it writes that add data are refused and a NOSPACE alarm is raised")
	fs.DurationVar(&o.corruptCheck, "corrupt-check-time", time.Minute, "how often the leader compares the members' hashes of the key space and raises a CORRUPT alarm for a member whose data differs from the majority's (0: never; etcd's default is 0)")
	fs.DurationVar(&o.corruptCheck, "experimental-corrupt-check-time", time.Minute, "deprecated: etcd 3.5's name of --corrupt-check-time")
	fs.DurationVar(&o.readLease, "read-lease-duration", member.DefaultReadLeaseDuration, "read lease the leader grants to client/cache sessions: longer serves more reads from memory, and makes a write to a key whose holder died wait longer (at most this long); 0 grants none")
	fs.IntVar(&o.readLeaseMaxKeys, "read-lease-max-keys", member.DefaultReadLeaseMaxKeys, "read leases the leader holds at once, over every key and holder; past it, reads are answered without a lease")
	fs.IntVar(&o.readLeaseMaxHolders, "read-lease-max-holders-per-key", member.DefaultReadLeaseMaxHoldersPerKey, "read-lease holders of one key; past it, reads of the key are answered without a lease")
	fs.StringVar(&o.authToken, "auth-token", "simple", "auth tokens, as etcd: simple (the default; tokens live on the members, each valid --auth-token-ttl after its last use) or jwt,sign-method=ALG,priv-key=FILE[,pub-key=FILE][,ttl=5m] (signed tokens any member verifies; pub-key alone verifies without issuing)")
	fs.IntVar(&o.authTokenTTL, "auth-token-ttl", 300, "seconds a simple auth token stays valid after its last use")
	fs.IntVar(&o.bcryptCost, "bcrypt-cost", 10, "bcrypt cost of the password hashes this member makes (4 to 31)")
	fs.StringVar(&o.clientTLS.CertFile, "cert-file", "", "path to the client server TLS cert file (for https:// client URLs)")
	fs.StringVar(&o.clientTLS.KeyFile, "key-file", "", "path to the client server TLS key file")
	fs.StringVar(&o.clientTLS.TrustedCAFile, "trusted-ca-file", "", "path to the CA bundle that signs client certificates")
	fs.BoolVar(&o.clientTLS.ClientCertAuth, "client-cert-auth", false, "refuse clients without a certificate signed by --trusted-ca-file")
	fs.StringVar(&o.peerTLS.CertFile, "peer-cert-file", "", "path to the peer TLS cert file (for https:// peer URLs); also presented when dialing other members")
	fs.StringVar(&o.peerTLS.KeyFile, "peer-key-file", "", "path to the peer TLS key file")
	fs.StringVar(&o.peerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "path to the CA bundle that signs the other members' certificates")
	fs.BoolVar(&o.peerTLS.ClientCertAuth, "peer-client-cert-auth", false, "refuse peers without a certificate signed by --peer-trusted-ca-file")
	fs.StringVar(&o.clientTLS.CRLFile, "client-crl-file", "", "certificate revocation list (PEM or DER): clients presenting a certificate it revokes are refused; read at every connection")
	fs.StringVar(&o.peerTLS.CRLFile, "peer-crl-file", "", "certificate revocation list for peer certificates, as --client-crl-file")
	fs.BoolVar(&o.clientTLS.AutoTLS, "auto-tls", false, "serve https:// client URLs with a self-signed certificate made on first start (in DATA_DIR/fixtures/client) when --cert-file is not given: encrypted, nobody authenticated")
	fs.BoolVar(&o.peerTLS.AutoTLS, "peer-auto-tls", false, "serve and dial https:// peer URLs with a self-signed certificate (DATA_DIR/fixtures/peer) when --peer-cert-file is not given; members do not verify each other's certificate")
	fs.UintVar(&o.selfSignedCertValidity, "self-signed-cert-validity", 1, "years a certificate made by --auto-tls or --peer-auto-tls is valid")
	fs.StringVar(&o.dns.Addr, "dns-addr", "", "HOST:PORT to answer DNS on (UDP and TCP): SRV and A/AAAA records of the services registered with corenode register or client/discovery, as SERVICE.service.<dns-domain> (default: no DNS)")
	fs.StringVar(&o.dns.Domain, "dns-domain", "corenode.", "the DNS zone --dns-addr answers")
	fs.DurationVar(&o.dns.TTL, "dns-ttl", 0, "TTL of the DNS records (0: resolvers do not cache, so a removed endpoint is gone from the next answer)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: corenode [flags]\n       corenode health [--endpoint URL] [--cacert F --cert F --key F]\n"+
			"       corenode snapshot restore FILE --name N --data-dir D --initial-cluster C --initial-advertise-peer-urls U\n"+
			"       "+holdSynopsis("lock")+"\n       "+holdSynopsis("elect")+"\n       "+registerSynopsis+"\n"+
			"       corenode version\n\n"+
			"Every flag can also be set by an environment variable CORENODE_<FLAG>, e.g. CORENODE_DATA_DIR;\n"+
			"a flag given on the command line wins.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// fromEnv sets every flag not given on the command line from CORENODE_<NAME>.
func fromEnv(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		env := "CORENODE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	return errors.Join(errs...)
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

func run(args []string) error {
	var o options
	fs := newFlagSet(&o)
	// A mistyped flag gets one line, not the whole usage.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.Usage()
			return nil
		}
		return fmt.Errorf("%w (see corenode --help)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see corenode --help)", fs.Arg(0))
	}
	if err := fromEnv(fs); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(logger)
	if o.dataDir == "" {
		o.dataDir = o.name + ".corenode"
	}
	if o.initialCluster == "" {
		o.initialCluster = o.name + "=" + o.advertisePeer
	}
	if o.commitNotifyMS == 0 {
		o.commitNotifyMS = min(50, o.heartbeatMS)
	}
	if o.commitNotifyMS < 1 || o.commitNotifyMS > o.heartbeatMS {
		return fmt.Errorf("--commit-notify-interval (%d ms) must be between 1 and --heartbeat-interval (%d ms)", o.commitNotifyMS, o.heartbeatMS)
	}
	if o.readLease < 0 {
		return fmt.Errorf("--read-lease-duration (%s) must not be negative", o.readLease)
	}
	if o.readLeaseMaxKeys <= 0 || o.readLeaseMaxHolders <= 0 {
		return fmt.Errorf("--read-lease-max-keys (%d) and --read-lease-max-holders-per-key (%d) must be positive", o.readLeaseMaxKeys, o.readLeaseMaxHolders)
	}
	tokens, err := auth.ParseTokenKind(o.authToken)
	if err != nil {
		return err
	}
	o.authTokens = tokens
	if o.authTokenTTL <= 0 {
		return fmt.Errorf("--auth-token-ttl (%d) must be positive", o.authTokenTTL)
	}
	if !auth.ValidBcryptCost(o.bcryptCost) {
		return fmt.Errorf("--bcrypt-cost (%d) must be between 4 and 31", o.bcryptCost)
	}
	if o.corruptCheck < 0 {
		return fmt.Errorf("--corrupt-check-time (%s) must not be negative", o.corruptCheck)
	}
	if o.watchProgressNotify <= 0 {
		return fmt.Errorf("--watch-progress-notify-interval (%s) must be positive", o.watchProgressNotify)
	}
	if o.maxLearners < 1 {
		return fmt.Errorf("--max-learners (%d) must be at least 1", o.maxLearners)
	}
	if o.selfSignedCertValidity < 1 {
		return fmt.Errorf("--self-signed-cert-validity (%d) must be at least 1 (year)", o.selfSignedCertValidity)
	}
	if o.electionMS < 5*o.heartbeatMS {
		return fmt.Errorf("--election-timeout (%d ms) should be at least 5 times --heartbeat-interval (%d ms)", o.electionMS, o.heartbeatMS)
	}
	clockCtx, stopClock := context.WithCancel(context.Background())
	defer stopClock()
	leaseClock, err := testClock(clockCtx, logger)
	if err != nil {
		return err
	}
	m, err := member.Start(member.Config{
		Name:                      o.name,
		DataDir:                   o.dataDir,
		ListenClientURLs:          splitURLs(o.listenClient),
		AdvertiseClientURLs:       splitURLs(o.advertiseClient),
		ListenPeerURLs:            splitURLs(o.listenPeer),
		InitialAdvertisePeerURLs:  splitURLs(o.advertisePeer),
		InitialCluster:            o.initialCluster,
		InitialClusterState:       o.initialState,
		InitialClusterToken:       o.initialToken,
		ForceNewCluster:           o.forceNewCluster,
		StrictReconfigCheck:       o.strictReconfigCheck,
		MaxLearners:               o.maxLearners,
		HeartbeatInterval:         time.Duration(o.heartbeatMS) * time.Millisecond,
		ElectionTimeout:           time.Duration(o.electionMS) * time.Millisecond,
		CommitNotifyInterval:      time.Duration(o.commitNotifyMS) * time.Millisecond,
		SnapshotCount:             o.snapshotCount,
		LogStore:                  o.logStore,
		MaxRequestBytes:           o.maxRequestBytes,
		MaxTxnOps:                 o.maxTxnOps,
		EnablePprof:               o.enablePprof,
		Logger:                    logger,
		Metrics:                   prometheus.DefaultRegisterer,
		LeaseCheckpointAfter:      time.Duration(o.leaseCheckpointMS) * time.Millisecond,
		LeaseTick:                 time.Duration(o.leaseTickMS) * time.Millisecond,
		LeaseBatch:                o.leaseBatch,
		LeaseClock:                leaseClock,
		WatchProgressNotify:       o.watchProgressNotify,
		QuotaBackendBytes:         o.quotaBackendBytes,
		AuthTokens:                o.authTokens,
		AuthTokenTTL:              time.Duration(o.authTokenTTL) * time.Second,
		BcryptCost:                o.bcryptCost,
		CorruptCheckTime:          o.corruptCheck,
		ReadLeaseDuration:         cmp.Or(o.readLease, -1), // the flag's 0 is none; the config's is the default
		ReadLeaseMaxKeys:          o.readLeaseMaxKeys,
		ReadLeaseMaxHoldersPerKey: o.readLeaseMaxHolders,
		ClientTLS:                 o.clientTLS,
		PeerTLS:                   o.peerTLS,
		SelfSignedCertValidity:    o.selfSignedCertValidity,
		DNS:                       o.dns,
	})
	if err != nil {
		return err
	}
	gcCtx, stopGC := context.WithCancel(context.Background())
	defer stopGC()
	go tuneGC(gcCtx, logger)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		logger.Info("stopping", "signal", s.String())
		return m.Close()
	case <-m.Removed():
		m.Close()
		return errors.New("this member was removed from the cluster (etcdctl member remove); " +
			"to rejoin, remove its data dir and add it again")
	case <-m.Halted():
		m.Close()
		return m.HaltErr()
	}
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

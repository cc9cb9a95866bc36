package member

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/lease"
	"github.com/corenode/corenode/node"
	"github.com/corenode/corenode/readlease"
)

// Config is one member's configuration; the corenode command fills it from
// etcd-named flags.
type Config struct {
	Name                     string
	DataDir                  string
	ListenClientURLs         []string
	AdvertiseClientURLs      []string
	ListenPeerURLs           []string
	InitialAdvertisePeerURLs []string
	// InitialCluster is "name=peerURL,name=peerURL,..." as etcd takes it.
	InitialCluster      string
	InitialClusterState string // "new" or "existing"
	InitialClusterToken string
	// ForceNewCluster is etcd's --force-new-cluster: this member restarts
	// on its data as a one-member cluster (node.Config.ForceNewCluster);
	// the --initial-cluster flags play no part. Meant for one start.
	ForceNewCluster bool
	// StrictReconfigCheck refuses membership changes that could cost the
	// cluster its quorum, as etcd's --strict-reconfig-check (true there by
	// default; the zero value here is off, the corenode command's default on).
	StrictReconfigCheck bool
	// MaxLearners bounds the learners (etcd's --max-learners); zero means 1.
	MaxLearners int

	HeartbeatInterval time.Duration
	ElectionTimeout   time.Duration
	// CommitNotifyInterval: see node.Config.
	CommitNotifyInterval time.Duration
	SnapshotCount        uint64
	// SnapshotCatchUpEntries: see node.Config (etcd's
	// --snapshot-catchup-entries).
	SnapshotCatchUpEntries uint64
	// MaxSnapshots: see node.Config (etcd's --max-snapshots, whose 0,
	// every snapshot, is a negative count here).
	MaxSnapshots    int
	MaxRequestBytes int
	MaxTxnOps       int
	// MaxConcurrentStreams bounds the gRPC streams of one client
	// connection (etcd's --max-concurrent-streams); zero means 1<<20.
	MaxConcurrentStreams uint32
	// GRPCKeepalive is etcd's --grpc-keepalive-min-time, -interval and
	// -timeout; zero values mean etcd's 5 s, 2 h and 20 s.
	GRPCKeepalive GRPCKeepalive
	// UnsafeNoFsync: see node.Config (etcd's --unsafe-no-fsync).
	UnsafeNoFsync bool
	// WALDir, when set, holds the raft log instead of DataDir (etcd's
	// --wal-dir); the data dir records it, and refuses to start without it.
	WALDir string
	// LogStore is the raft log store (logstore.WAL or
	// logstore.BoltDB); see node.Config.LogStore.
	LogStore string

	// ClientTLS serves https:// client URLs; PeerTLS serves https:// peer URLs
	// and is what this member presents when it dials other members.
	ClientTLS TLSInfo
	PeerTLS   TLSInfo
	// SelfSignedCertValidity is how many years a certificate made for
	// AutoTLS is valid (etcd's --self-signed-cert-validity); zero means 1.
	SelfSignedCertValidity uint

	// Listeners already bound, used instead of opening the listen URLs
	// (tests bind port 0 first so they know the addresses).
	PeerListener    net.Listener
	ClientListeners []net.Listener

	Logger *slog.Logger
	// RaftLog receives hashicorp/raft's own log lines in hclog's format;
	// nil sends them through Logger.
	RaftLog io.Writer
	// Metrics registers the member's Prometheus series; nil registers none
	// (several members in one test process would collide). /metrics serves
	// what Gatherer gathers, Metrics itself when that is a Registry.
	Metrics  prometheus.Registerer
	Gatherer prometheus.Gatherer
	// EnablePprof serves Go's profiles under /debug/pprof/ on the client
	// URLs, as etcd's --enable-pprof does.
	EnablePprof bool
	// LeaseCheckpointAfter and LeaseTick tune lease checkpoints (see
	// lease.TrackerConfig and checkpoint.Config); zero means the defaults.
	LeaseCheckpointAfter time.Duration
	LeaseTick            time.Duration
	LeaseBatch           int
	// LeaseClock is the one clock this member measures leases and read
	// leases by: the expiry tracker's deadlines, the checkpoint scheduler's
	// ticks and the read-lease manager's grants, waits and horizon. Nil is
	// lease.SystemClock. Only tests set another (a clock at another rate,
	// for jepsen-lite's clock-rate fault; cmd/corenode's testClock): the
	// deadlines are promises to holders on other clocks, so they must all
	// run at one rate.
	LeaseClock lease.Clock
	// WatchProgressNotify is etcd's --watch-progress-notify-interval; zero
	// means etcd's default of 10 minutes.
	WatchProgressNotify time.Duration
	// QuotaBackendBytes is etcd's --quota-backend-bytes: past it, writes that
	// add data are refused and a NOSPACE alarm is raised. Zero means etcd's
	// default, DefaultQuotaBackendBytes; less than zero means no quota.
	QuotaBackendBytes int64
	// AuthTokenTTL is how long a simple auth token lives after its last use
	// (etcd's --auth-token-ttl); zero means etcd's 300 s. BcryptCost is
	// etcd's --bcrypt-cost for passwords hashed on this member; zero means
	// 10. With ClientTLS.ClientCertAuth, a verified certificate's common
	// name is the user of a call without a token, as in etcd.
	AuthTokenTTL time.Duration
	BcryptCost   int
	// AuthTokens is etcd's --auth-token, parsed: simple tokens (the zero
	// value) or JWTs. Give every member the same.
	AuthTokens auth.TokenKind

	// CorruptCheckTime is how often the leader compares the members' hashes
	// of the key space and raises CORRUPT for one that differs from the
	// majority (package integrity); zero turns the check off.
	CorruptCheckTime time.Duration
	// InitialCorruptCheck compares this member's hash with the others'
	// once it has caught up, and fails the member (Failed) on a mismatch
	// (etcd's --experimental-initial-corrupt-check). It runs right after
	// the member catches up, not before it serves anything as etcd's does.
	InitialCorruptCheck bool

	// AutoCompaction has the leader compact the history by itself (etcd's
	// --auto-compaction-mode, --auto-compaction-retention); zero: never.
	AutoCompaction AutoCompaction

	// LogVerifyInterval is how often the leader appends a raft log
	// verification checkpoint (node.Config.LogVerifyInterval); zero means
	// node.DefaultLogVerifyInterval.
	LogVerifyInterval time.Duration

	// ReadLeaseDuration is the read lease the leader grants to cache
	// sessions (package readlease): zero means DefaultReadLeaseDuration, less
	// than zero grants none. ReadLeaseMaxKeys and ReadLeaseMaxHoldersPerKey
	// bound the leader's table (zero: the defaults).
	ReadLeaseDuration         time.Duration
	ReadLeaseMaxKeys          int
	ReadLeaseMaxHoldersPerKey int

	// ListenClientHTTPURLs serve the client HTTP (JSON gateway, /health,
	// /metrics...) alone; with them, the client URLs serve gRPC only, and
	// answer HTTP with a pointer there (etcd's --listen-client-http-urls).
	ListenClientHTTPURLs []string
	// PeerLocalAddrFromAdvertise dials the other members from the IP of
	// the first advertised peer URL, when it is one (etcd's
	// SetMemberLocalAddr feature gate); otherwise a member dials from the
	// address its peer listener is bound to, if specific.
	PeerLocalAddrFromAdvertise bool
	// SocketOpts apply to every listener the member opens.
	SocketOpts SocketOpts
	// CORS are the origins the HTTP answers allow (etcd's --cors), and
	// HostWhitelist the Host names plain-HTTP requests may name (etcd's
	// --host-whitelist); nil or "*" allows all, as etcd's defaults.
	CORS, HostWhitelist []string
	// WarningUnaryRequestDuration logs unary calls slower than it (etcd's
	// --warning-unary-request-duration); zero logs none.
	WarningUnaryRequestDuration time.Duration
	// WarningApplyDuration logs KV calls slower than it (etcd's
	// --warning-apply-duration); zero logs none.
	WarningApplyDuration time.Duration
	// GRPCServerOptions are added to the client gRPC server's (the
	// command's distributed tracing).
	GRPCServerOptions []grpc.ServerOption
	// ListenMetricsURLs serve /metrics, /health, /livez and /readyz only
	// (etcd's --listen-metrics-urls); https:// ones with ClientTLS.
	ListenMetricsURLs []string

	// DNS answers service lookups over DNS when DNS.Addr is set (dns.go).
	DNS DNSConfig
}

// GRPCKeepalive is how the client gRPC server keeps connections alive.
type GRPCKeepalive struct {
	// MinTime is how often a client may ping at most, as etcd.
	MinTime time.Duration
	// Interval is how long a connection is idle before the server pings it;
	// Timeout how long it then waits for the answer before closing it.
	// Less than zero turns the pings off.
	Interval, Timeout time.Duration
}

func (cfg Config) leaseClock() lease.Clock {
	if cfg.LeaseClock == nil {
		return lease.SystemClock{}
	}
	return cfg.LeaseClock
}

// Read-lease defaults. A longer lease serves more reads from memory and
// makes a write to a key whose holder died wait longer (at most this long).
const (
	DefaultReadLeaseDuration         = 2 * time.Second
	DefaultReadLeaseMaxKeys          = 100_000
	DefaultReadLeaseMaxHoldersPerKey = 10_000
)

func readLeaseConfig(cfg Config, logger *slog.Logger) readlease.Config {
	rc := readlease.Config{
		Duration: cmp.Or(cfg.ReadLeaseDuration, DefaultReadLeaseDuration),
		// Short against the lease, and longer than a confirmation round
		// takes on a healthy cluster (one round trip to a quorum).
		Window: cmp.Or(cfg.ElectionTimeout, time.Second) / 4, // node's default
		// Live holders answer an invalidation within a few round trips; a
		// read waits that long for a write still waiting for them, and no
		// longer, so a holder that died does not stall the key's readers.
		HolderWait: 20 * time.Millisecond,
		Limits: readlease.Limits{
			MaxKeys:          cmp.Or(cfg.ReadLeaseMaxKeys, DefaultReadLeaseMaxKeys),
			MaxHoldersPerKey: cmp.Or(cfg.ReadLeaseMaxHoldersPerKey, DefaultReadLeaseMaxHoldersPerKey),
		},
		Clock:   cfg.leaseClock(),
		Logger:  logger,
		Metrics: cfg.Metrics,
	}
	if rc.Duration < 0 {
		rc.Duration = 0
	}
	return rc
}

// DefaultQuotaBackendBytes is etcd's default space quota, 2 GiB.
const DefaultQuotaBackendBytes = 2 << 30

// ParseInitialCluster parses etcd's --initial-cluster form into name -> peer URLs.
func ParseInitialCluster(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, u, ok := strings.Cut(part, "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("--initial-cluster: %q is not name=peer-url", part)
		}
		if _, err := hostPort(u); err != nil {
			return nil, fmt.Errorf("--initial-cluster: member %s: %w", name, err)
		}
		out[name] = append(out[name], u)
	}
	if len(out) == 0 {
		return nil, errors.New("--initial-cluster is empty")
	}
	return out, nil
}

func hostPort(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("bad URL %q: %w", rawURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("bad URL %q: the scheme must be http or https", rawURL)
	}
	if u.Port() == "" {
		return "", fmt.Errorf("bad URL %q: a port is required", rawURL)
	}
	return u.Host, nil
}

func isHTTPS(rawURL string) bool {
	return strings.HasPrefix(rawURL, "https://") || strings.HasPrefix(rawURL, "unixs://")
}

// initialServers is the raft configuration --initial-cluster describes,
// after checking that it names this member with its advertised peer URLs.
func initialServers(name, initialCluster, token string, advertisePeerURLs []string) ([]raft.Server, error) {
	initial, err := ParseInitialCluster(initialCluster)
	if err != nil {
		return nil, err
	}
	if _, ok := initial[name]; !ok {
		return nil, fmt.Errorf("--initial-cluster has no member named %q (--name)", name)
	}
	if !slices.Equal(sorted(initial[name]), sorted(advertisePeerURLs)) {
		return nil, fmt.Errorf("--initial-cluster gives %s peer URLs %v but --initial-advertise-peer-urls is %v",
			name, initial[name], advertisePeerURLs)
	}
	var servers []raft.Server
	for _, urls := range initial {
		addr, _ := hostPort(urls[0])
		servers = append(servers, raft.Server{Suffrage: raft.Voter,
			ID: node.ServerID(node.MemberID(urls, token)), Address: raft.ServerAddress(addr)})
	}
	slices.SortFunc(servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return servers, nil
}

// MinTTL is the smallest lease TTL granted, in seconds: etcd's rule of one
// and a half election timeouts, rounded up, so a lease outlives an election.
func MinTTL(electionTimeout time.Duration) int64 {
	if electionTimeout <= 0 {
		electionTimeout = time.Second
	}
	ms := (3*electionTimeout/2 + time.Second - 1) / time.Second
	return max(int64(ms), 1)
}

func sorted(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

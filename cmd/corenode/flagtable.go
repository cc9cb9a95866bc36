package main

import (
	"strconv"

	"github.com/corenode/corenode/logstore"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/node"
	"github.com/corenode/corenode/transport"
)

// use says what corenode does with a flag.
type use int

const (
	works    use = iota // as on etcd
	own                 // corenode's own flag; etcd has none
	fixed               // corenode always behaves one way (only); another value has no effect
	noEffect            // tunes a part of etcd corenode does not have
	notYet              // a feature corenode should have and has not yet
	refused             // notYet, and one that changes what the member is: set, it stops the start
)

// kind is the type of a flag's value, for flags bound to no option.
type kind int

const (
	kString kind = iota
	kBool
	kInt
	kDuration
	kList
)

// flagDef is one row of the flag table: every flag corenode takes, etcd
// 3.6's and its own. The command line, the environment, the config file,
// --help, the start-up warnings and the operations doc all come from it.
type flagDef struct {
	name string
	// aliases are other spellings etcd takes: the --experimental-X of
	// etcd 3.5, deprecated in 3.6 (a warning when used), or corenode's.
	aliases []string
	// gate is the --feature-gates name that sets the flag too.
	gate string
	def  string // default, as the flag parses it
	// etcd is etcd 3.6's help, its first sentence; empty for corenode's own.
	etcd string
	use  use
	// does says what corenode does with the flag, or why it has no effect.
	does string
	// only is, for use fixed, the one value corenode honours.
	only string
	// bind points at the option the flag sets; nil for flags without one.
	bind func(*options) any
	kind kind // of a flag with no bind
}

// etcdVersionsTested are the etcd releases whose --help the table
// follows; TestEveryEtcdFlagIsAccepted checks that each lists no flag and
// no feature gate the table lacks. etcd 3.7 dropped 3.6's
// --experimental- names and v2 discovery's flags; corenode still takes
// them, for 3.6's command lines.
var etcdVersionsTested = []string{"v3.6.16", "v3.7.3"}

func flagTable() []flagDef {
	return []flagDef{
		// Member.
		{name: "name", def: "default", etcd: "Human-readable name for this member.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.name }},
		{name: "data-dir", def: "", etcd: "Path to the data directory.", use: works,
			does: "as etcd; default `${name}.corenode`", bind: func(o *options) any { return &o.dataDir }},
		{name: "wal-dir", etcd: "Path to the dedicated wal directory.", use: works,
			does: "the raft log (`wal/` or `raft.db`) lives there, snapshots in --data-dir; the data dir records it and refuses to start without it", bind: func(o *options) any { return &o.walDir }},
		{name: "snapshot-count", def: "10000", etcd: "Number of committed transactions to trigger a snapshot.", use: works,
			does: "entries between raft snapshots, as etcd (the entries kept behind one: --snapshot-catchup-entries)", bind: func(o *options) any { return &o.snapshotCount }},
		{name: "heartbeat-interval", def: "100", etcd: "Time (in milliseconds) of a heartbeat interval.", use: works,
			does: "as etcd; see Timing flags in docs/operations.md", bind: func(o *options) any { return &o.heartbeatMS }},
		{name: "election-timeout", def: "1000", etcd: "Time (in milliseconds) for an election to timeout.", use: works,
			does: "as etcd; see Timing flags in docs/operations.md", bind: func(o *options) any { return &o.electionMS }},
		{name: "initial-election-tick-advance", def: "true", etcd: "Whether to fast-forward initial election ticks on boot for faster election.", use: noEffect, kind: kBool,
			does: "hashicorp/raft has no election ticks: a started member campaigns after one heartbeat timeout without a leader"},
		{name: "listen-peer-urls", def: "http://127.0.0.1:2380", etcd: "List of URLs to listen on for peer traffic.", use: works,
			does: "raft and forwarding; one URL", bind: func(o *options) any { return &o.listenPeer }},
		{name: "listen-client-urls", def: "http://127.0.0.1:2379", etcd: "List of URLs to listen on for client grpc traffic and http as long as --listen-client-http-urls is not specified.", use: works,
			does: "gRPC and HTTP on each; http://, https://, and, as etcd, unix:// and unixs:// (the socket file is the URL's host and path)", bind: func(o *options) any { return &o.listenClient }},
		{name: "listen-client-http-urls", etcd: "List of URLs to listen on for http only client traffic.", use: works,
			does: "as etcd: HTTP (gateway, /health, /metrics...) there; the client URLs then serve gRPC only", bind: func(o *options) any { return &o.listenClientHTTP }},
		{name: "max-snapshots", def: "5", etcd: "Maximum number of snapshot files to retain (0 is unlimited).", use: works,
			does: "as etcd: the raft snapshots kept in --data-dir/snapshots, the oldest removed after each new one and at start; 0 keeps every one. Each is a whole copy of the state (etcd deprecated the flag in 3.6)", bind: func(o *options) any { return &o.maxSnapshots }},
		{name: "max-wals", def: "5", etcd: "Maximum number of wal files to retain (0 is unlimited).", use: noEffect, kind: kInt,
			does: "no log file outlives the log, so there are none to count: raft-wal deletes a 16 MiB segment once every entry in it is behind the log's start, which each snapshot moves to --snapshot-catchup-entries behind the end, and deletes segment files it does not list when it opens (so 0 cannot keep old ones); boltdb is one raft.db"},
		{name: "memory-mlock", aliases: []string{"experimental-memory-mlock"}, def: "false", etcd: "Enable to enforce etcd pages (in particular bbolt) to stay in RAM.", use: noEffect, kind: kBool,
			does: "corenode's state is in memory already; it has no bbolt pages to lock"},
		{name: "quota-backend-bytes", def: "0", etcd: "Sets the maximum size (in bytes) that the etcd backend database may consume.", use: works,
			does: "as etcd, over corenode's state (0: 2 GiB; negative: none)", bind: func(o *options) any { return &o.quotaBackendBytes }},
		{name: "backend-bbolt-freelist-type", def: "map", etcd: "BackendFreelistType specifies the type of freelist that boltdb backend uses.", use: noEffect, kind: kString,
			does: "corenode has no bbolt backend"},
		{name: "backend-batch-interval", def: "0s", etcd: "BackendBatchInterval is the maximum time before commit the backend transaction.", use: noEffect, kind: kDuration,
			does: "corenode has no bbolt backend: an entry is applied in memory as it commits"},
		{name: "backend-batch-limit", def: "0", etcd: "BackendBatchLimit is the maximum operations before commit the backend transaction.", use: noEffect, kind: kInt,
			does: "corenode has no bbolt backend: an entry is applied in memory as it commits"},
		{name: "max-txn-ops", def: "128", etcd: "Maximum number of operations permitted in a transaction.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.maxTxnOps }},
		{name: "max-request-bytes", def: "1572864", etcd: "Maximum client request size in bytes the server will accept.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.maxRequestBytes }},
		{name: "max-concurrent-streams", def: "4294967295", etcd: "Maximum concurrent streams that each client can open at a time.", use: works,
			does: "as etcd: gRPC streams per client connection", bind: func(o *options) any { return &o.maxConcurrentStreams }},
		{name: "grpc-keepalive-min-time", def: "5s", etcd: "Minimum duration interval that a client should wait before pinging server.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.keepaliveMinTime }},
		{name: "grpc-keepalive-interval", def: "2h", etcd: "Frequency duration of server-to-client ping to check if a connection is alive (0 to disable).", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.keepaliveInterval }},
		{name: "grpc-keepalive-timeout", def: "20s", etcd: "Additional duration of wait before closing a non-responsive connection (0 to disable).", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.keepaliveTimeout }},
		{name: "socket-reuse-port", def: "false", etcd: "Enable to set socket option SO_REUSEPORT on listeners allowing rebinding of a port already in use.", use: works,
			does: "as etcd, on every listener", bind: func(o *options) any { return &o.socketOpts.ReusePort }},
		{name: "socket-reuse-address", def: "false", etcd: "Enable to set socket option SO_REUSEADDR on listeners allowing binding to an address in TIME_WAIT state.", use: works,
			does: "as etcd, on every listener (Go sets it on Unix anyway)", bind: func(o *options) any { return &o.socketOpts.ReuseAddress }},
		{name: "enable-grpc-gateway", def: "true", etcd: "Enable GRPC gateway.", use: fixed, only: "true", kind: kBool,
			does: "the JSON gateway is always served on the client URLs"},
		{name: "raft-read-timeout", def: "5s", etcd: "Read timeout set on each rafthttp connection", use: noEffect, kind: kDuration,
			does: "peers talk over hashicorp/raft's stream layer, with its own timeouts, not rafthttp"},
		{name: "raft-write-timeout", def: "5s", etcd: "Write timeout set on each rafthttp connection", use: noEffect, kind: kDuration,
			does: "peers talk over hashicorp/raft's stream layer, with its own timeouts, not rafthttp"},
		{name: "feature-gates", def: "", etcd: "A set of key=value pairs that describe server level feature gates for alpha/experimental features.", use: works,
			does: "each gate sets the flag of the same feature (see the rows naming a gate); the gates no flag sets have rows of their own; AllAlpha and AllBeta set every gate at that stage that is not set otherwise, as etcd", bind: func(o *options) any { return &o.featureGates }},

		// Clustering.
		{name: "initial-advertise-peer-urls", def: "http://127.0.0.1:2380", etcd: "List of this member's peer URLs to advertise to the rest of the cluster.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.advertisePeer }},
		{name: "initial-cluster", def: "", etcd: "Initial cluster configuration for bootstrapping.", use: works,
			does: "as etcd; default `${name}=${initial-advertise-peer-urls}`", bind: func(o *options) any { return &o.initialCluster }},
		{name: "initial-cluster-state", def: "new", etcd: "Initial cluster state ('new' when bootstrapping a new cluster or 'existing' when adding new members to an existing cluster).", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.initialState }},
		{name: "initial-cluster-token", def: "corenode-cluster", etcd: "Initial cluster token for the etcd cluster during bootstrap.", use: works,
			does: "as etcd; member IDs derive from it and the peer URLs", bind: func(o *options) any { return &o.initialToken }},
		{name: "advertise-client-urls", def: "http://127.0.0.1:2379", etcd: "List of this member's client URLs to advertise to the public.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.advertiseClient }},
		{name: "discovery", etcd: "Discovery URL used to bootstrap the cluster for v2 discovery.", use: refused, kind: kString,
			does: "v2 discovery (deprecated by etcd): use --discovery-endpoints and --discovery-token, or --initial-cluster"},
		{name: "discovery-token", etcd: "V3 discovery: discovery token for the etcd cluster to be bootstrapped.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.discovery.token }},
		{name: "discovery-endpoints", etcd: "V3 discovery: List of gRPC endpoints of the discovery service.", use: works,
			does: "as etcd: the member registers on this cluster and takes the first --discovery-token size members as its initial cluster (first start only)", bind: func(o *options) any { return &o.discovery.endpoints }},
		{name: "discovery-dial-timeout", def: "2s", etcd: "V3 discovery: dial timeout for client connections.", use: works, does: "as etcd", bind: func(o *options) any { return &o.discovery.dialTimeout }},
		{name: "discovery-request-timeout", def: "5s", etcd: "V3 discovery: timeout for discovery requests (excluding dial timeout).", use: works, does: "as etcd", bind: func(o *options) any { return &o.discovery.requestTimeout }},
		{name: "discovery-keepalive-time", def: "2s", etcd: "V3 discovery: keepalive time for client connections.", use: works, does: "as etcd", bind: func(o *options) any { return &o.discovery.keepaliveTime }},
		{name: "discovery-keepalive-timeout", def: "6s", etcd: "V3 discovery: keepalive timeout for client connections.", use: works, does: "as etcd", bind: func(o *options) any { return &o.discovery.keepaliveTimeout }},
		{name: "discovery-insecure-transport", def: "true", etcd: "V3 discovery: disable transport security for client connections.", use: works, does: "as etcd", bind: func(o *options) any { return &o.discovery.insecureTransport }},
		{name: "discovery-insecure-skip-tls-verify", def: "false", etcd: "V3 discovery: skip server certificate verification.", use: works, does: "as etcd", bind: func(o *options) any { return &o.discovery.insecureSkipVerify }},
		{name: "discovery-cert", etcd: "V3 discovery: identify secure client using this TLS certificate file.", use: works, does: "as etcd", bind: func(o *options) any { return &o.discovery.cert }},
		{name: "discovery-key", etcd: "V3 discovery: identify secure client using this TLS key file.", use: works, does: "as etcd", bind: func(o *options) any { return &o.discovery.key }},
		{name: "discovery-cacert", etcd: "V3 discovery: verify certificates of TLS-enabled secure servers using this CA bundle.", use: works, does: "as etcd", bind: func(o *options) any { return &o.discovery.cacert }},
		{name: "discovery-user", etcd: "V3 discovery: username[:password] for authentication (prompt if password is not supplied).", use: works,
			does: "as etcd, without the prompt: give the password", bind: func(o *options) any { return &o.discovery.user }},
		{name: "discovery-password", etcd: "V3 discovery: password for authentication.", use: works, does: "as etcd", bind: func(o *options) any { return &o.discovery.password }},
		{name: "discovery-fallback", def: "exit", etcd: "Expected behavior ('exit') when discovery services fails.", use: works, does: "exit only, as etcd 3.6", bind: func(o *options) any { return &o.discovery.fallback }},
		{name: "discovery-proxy", etcd: "HTTP proxy to use for traffic to discovery service.", use: noEffect, kind: kString, does: "for v2 discovery only, which corenode does not do"},
		{name: "discovery-srv", etcd: "DNS srv domain used to bootstrap the cluster.", use: works,
			does: "as etcd: the initial cluster from _etcd-server-ssl._tcp and _etcd-server._tcp SRV records; this member must advertise its record's name:port", bind: func(o *options) any { return &o.discoverySRV }},
		{name: "discovery-srv-name", etcd: "Suffix to the dns srv name queried when bootstrapping.", use: works,
			does: "as etcd: _etcd-server-ssl-NAME._tcp...", bind: func(o *options) any { return &o.discoverySRVName }},
		{name: "strict-reconfig-check", def: "true", etcd: "Reject reconfiguration requests that would cause quorum loss.", use: works,
			does: "as etcd, see Membership", bind: func(o *options) any { return &o.strictReconfigCheck }},
		{name: "pre-vote", def: "true", etcd: "Enable the raft Pre-Vote algorithm to prevent disruption when a node that has been partitioned away rejoins the cluster.", use: fixed, only: "true", kind: kBool,
			does: "hashicorp/raft always pre-votes"},
		{name: "auto-compaction-retention", def: "0", etcd: "Auto compaction retention length. 0 means disable auto compaction.", use: works,
			does: "as etcd: the leader compacts by itself, keeping this much history (periodic: a duration, hours if a bare number) or this many revisions", bind: func(o *options) any { return &o.autoCompactionRetention }},
		{name: "auto-compaction-mode", def: "periodic", etcd: "Interpret 'auto-compaction-retention' one of: periodic|revision.", use: works,
			does: "as etcd: periodic compacts every retention (at most hourly) to the revision of one retention ago; revision every 5 minutes", bind: func(o *options) any { return &o.autoCompactionMode }},
		{name: "v2-deprecation", def: "write-only", etcd: "Phase of v2store deprecation.", use: noEffect, kind: kString,
			does: "corenode has no v2 store"},

		// Security.
		{name: "cert-file", etcd: "Path to the client server TLS cert file.", use: works, does: "as etcd, see TLS", bind: func(o *options) any { return &o.clientTLS.CertFile }},
		{name: "key-file", etcd: "Path to the client server TLS key file.", use: works, does: "as etcd", bind: func(o *options) any { return &o.clientTLS.KeyFile }},
		{name: "client-cert-auth", def: "false", etcd: "Enable client cert authentication.", use: works,
			does: "as etcd; a verified certificate's common name is the user of a call without a token", bind: func(o *options) any { return &o.clientTLS.ClientCertAuth }},
		{name: "client-cert-file", etcd: "Path to an explicit peer client TLS cert file otherwise cert file will be used when client auth is required.", use: works,
			does: "loaded and checked at start with --client-key-file, as etcd (a missing file, a key of another certificate or half a pair stops it); nothing presents it: etcd presents it when its gRPC gateway dials its own client URL, and corenode's gateway calls the server in process, so no client URL is ever dialed", bind: func(o *options) any { return &o.clientTLS.ClientCertFile }},
		{name: "client-key-file", etcd: "Path to an explicit peer client TLS key file otherwise key file will be used when client auth is required.", use: works,
			does: "see --client-cert-file", bind: func(o *options) any { return &o.clientTLS.ClientKeyFile }},
		{name: "client-crl-file", etcd: "Path to the client certificate revocation list file.", use: works, does: "as etcd; read at every connection", bind: func(o *options) any { return &o.clientTLS.CRLFile }},
		{name: "client-cert-allowed-hostname", etcd: "Comma-separated list of SAN hostnames for client cert authentication.", use: works,
			does: "as etcd: a client certificate must be valid for one of them (needs --client-cert-auth)", bind: func(o *options) any { return &o.clientTLS.AllowedHostnames }},
		{name: "trusted-ca-file", etcd: "Path to the client server TLS trusted CA cert file.", use: works, does: "as etcd", bind: func(o *options) any { return &o.clientTLS.TrustedCAFile }},
		{name: "auto-tls", def: "false", etcd: "Client TLS using generated certificates.", use: works,
			does: "as etcd: a self-signed certificate in DATA_DIR/fixtures/client", bind: func(o *options) any { return &o.clientTLS.AutoTLS }},
		{name: "peer-cert-file", etcd: "Path to the peer server TLS cert file.", use: works, does: "as etcd; also presented when dialing other members", bind: func(o *options) any { return &o.peerTLS.CertFile }},
		{name: "peer-key-file", etcd: "Path to the peer server TLS key file.", use: works, does: "as etcd", bind: func(o *options) any { return &o.peerTLS.KeyFile }},
		{name: "peer-client-cert-auth", def: "false", etcd: "Enable peer client cert authentication.", use: works, does: "as etcd", bind: func(o *options) any { return &o.peerTLS.ClientCertAuth }},
		{name: "peer-client-cert-file", etcd: "Path to an explicit peer client TLS cert file otherwise peer cert file will be used when client auth is required.", use: works,
			does: "as etcd: presented when dialing the other members", bind: func(o *options) any { return &o.peerTLS.ClientCertFile }},
		{name: "peer-client-key-file", etcd: "Path to an explicit peer client TLS key file otherwise peer key file will be used when client auth is required.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.peerTLS.ClientKeyFile }},
		{name: "peer-trusted-ca-file", etcd: "Path to the peer server TLS trusted CA file.", use: works, does: "as etcd", bind: func(o *options) any { return &o.peerTLS.TrustedCAFile }},
		{name: "peer-cert-allowed-cn", etcd: "Comma-separated list of allowed CNs for inter-peer TLS authentication.", use: works,
			does: "as etcd: peer certificates, connecting and dialed, must have one of these common names (needs --peer-client-cert-auth)", bind: func(o *options) any { return &o.peerTLS.AllowedCNs }},
		{name: "peer-cert-allowed-hostname", etcd: "Comma-separated list of allowed SAN hostnames for inter-peer TLS authentication.", use: works,
			does: "as etcd: peer certificates must be valid for one of these hostnames; excludes --peer-cert-allowed-cn", bind: func(o *options) any { return &o.peerTLS.AllowedHostnames }},
		{name: "peer-auto-tls", def: "false", etcd: "Peer TLS using self-generated certificates if --peer-key-file and --peer-cert-file are not provided.", use: works,
			does: "as etcd: DATA_DIR/fixtures/peer; members do not verify each other", bind: func(o *options) any { return &o.peerTLS.AutoTLS }},
		{name: "self-signed-cert-validity", def: "1", etcd: "The validity period of the client and peer certificates that are automatically generated by etcd, in years.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.selfSignedCertValidity }},
		{name: "peer-crl-file", etcd: "Path to the peer certificate revocation list file.", use: works, does: "as etcd", bind: func(o *options) any { return &o.peerTLS.CRLFile }},
		{name: "cipher-suites", etcd: "Comma-separated list of supported TLS cipher suites between client/server and peers (empty will be auto-populated by Go).", use: works,
			does: "as etcd, Go's names (TLS 1.2; Go does not let TLS 1.3's be chosen)", bind: func(o *options) any { return &o.cipherSuites }},
		{name: "cors", def: "*", etcd: "Comma-separated whitelist of origins for CORS (empty or * means allow all).", use: works,
			does: "as etcd: HTTP answers carry CORS headers for these origins only", bind: func(o *options) any { return &o.cors }},
		{name: "host-whitelist", def: "*", etcd: "Acceptable hostnames from HTTP client requests, if server is not secure (empty or * means allow all).", use: works,
			does: "as etcd: a plain-HTTP request naming another Host is refused (421)", bind: func(o *options) any { return &o.hostWhitelist }},
		{name: "tls-min-version", def: "TLS1.2", etcd: "Minimum TLS version supported by etcd. Possible values: TLS1.2, TLS1.3.", use: works,
			does: "as etcd, client and peer listeners and peer dials", bind: func(o *options) any { return &o.tlsMinVersion }},
		{name: "tls-max-version", def: "", etcd: "Maximum TLS version supported by etcd. Possible values: TLS1.2, TLS1.3 (empty will be auto-populated by Go).", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.tlsMaxVersion }},

		// Auth.
		{name: "auth-token", def: "simple", etcd: "Specify a v3 authentication token type and its options ('simple' or 'jwt').", use: works,
			does: "simple, or jwt,sign-method=ALG,priv-key=FILE[,pub-key=FILE][,ttl=5m]", bind: func(o *options) any { return &o.authToken }},
		{name: "bcrypt-cost", def: "10", etcd: "Specify the cost / strength of the bcrypt algorithm for hashing auth passwords.", use: works,
			does: "as etcd (4 to 31)", bind: func(o *options) any { return &o.bcryptCost }},
		{name: "auth-token-ttl", def: "300", etcd: "Time (in seconds) of the auth-token-ttl.", use: works,
			does: "as etcd: a simple token lives this long after its last use", bind: func(o *options) any { return &o.authTokenTTL }},

		// Profiling and monitoring.
		{name: "enable-pprof", def: "false", etcd: "Enable runtime profiling data via HTTP server.", use: works,
			does: "as etcd: /debug/pprof/ on the client URLs", bind: func(o *options) any { return &o.enablePprof }},
		{name: "metrics", def: "basic", etcd: "Set level of detail for exported metrics, specify 'extensive' to include server side grpc histogram metrics.", use: works,
			does: "basic or extensive; corenode's gRPC latency histogram (corenode_grpc_request_seconds) is exported with either, and extensive adds hashicorp/raft's own timings (corenode_raft_*: commitTime, leader_dispatchLog, rpc_appendEntries_storeLogs, fsm_applyBatch...; milliseconds, as Consul exports them)", bind: func(o *options) any { return &o.metrics }},
		{name: "listen-metrics-urls", etcd: "List of URLs to listen on for the /metrics and /health endpoints.", use: works,
			does: "as etcd: /metrics, /health, /livez and /readyz; https:// ones use the client TLS flags", bind: func(o *options) any { return &o.listenMetrics }},

		// Logging.
		{name: "logger", def: "zap", etcd: "Currently only supports 'zap' for structured logging.", use: works,
			does: "zap only, as etcd: its line format, written through log/slog", bind: func(o *options) any { return &o.logger }},
		{name: "log-outputs", def: "stderr", etcd: "Specify 'stdout' or 'stderr' to skip journald logging even when running under systemd, or list of comma separated output targets.", use: works,
			does: "stderr, stdout, or file paths (appended to); journald and `default` mean stderr", bind: func(o *options) any { return &o.logOutputs }},
		{name: "log-level", def: "info", etcd: "Configures log level. Only supports debug, info, warn, error, panic, or fatal.", use: works,
			does: "as etcd; raft's own lines follow it", bind: func(o *options) any { return &o.logLevel }},
		{name: "log-format", def: "json", etcd: "Configures log format. Only supports json, console.", use: works,
			does: "as etcd: one JSON object a line (level, ts, caller, msg, fields), or console's tab-separated line", bind: func(o *options) any { return &o.logFormat }},
		{name: "enable-log-rotation", def: "false", etcd: "Enable log rotation of a single log-outputs file target.", use: works,
			does: "as etcd: the one --log-outputs file is rotated as lumberjack does (NAME-TIME.EXT backups)", bind: func(o *options) any { return &o.logRotation }},
		{name: "log-rotation-config-json", def: `{"maxsize": 100, "maxage": 0, "maxbackups": 0, "localtime": false, "compress": false}`, etcd: "Configures log rotation if enabled with a JSON logger config.", use: works,
			does: "as etcd: maxsize (MB), maxage (days), maxbackups, localtime, compress (gzip)", bind: func(o *options) any { return &o.logRotationJSON }},
		{name: "warning-unary-request-duration", aliases: []string{"experimental-warning-unary-request-duration"}, def: "300ms", etcd: "Set time duration after which a warning is logged if a unary request takes more than this duration.", use: works,
			does: "as etcd: a slower unary call is logged (\"request stats\"); 0 logs none", bind: func(o *options) any { return &o.warnUnary }},

		// Distributed tracing.
		{name: "enable-distributed-tracing", aliases: []string{"experimental-enable-distributed-tracing"}, def: "false", etcd: "Enable distributed tracing.", use: works,
			does: "as etcd: an OpenTelemetry span for every client gRPC call, exported over OTLP/gRPC", bind: func(o *options) any { return &o.tracing.enabled }},
		{name: "distributed-tracing-address", aliases: []string{"experimental-distributed-tracing-address"}, def: "localhost:4317", etcd: "Distributed tracing collector address.", use: works,
			does: "as etcd (plain-text OTLP/gRPC)", bind: func(o *options) any { return &o.tracing.address }},
		{name: "distributed-tracing-service-name", aliases: []string{"experimental-distributed-tracing-service-name"}, def: "etcd", etcd: "Distributed tracing service name, must be same across all etcd instances.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.tracing.service }},
		{name: "distributed-tracing-instance-id", aliases: []string{"experimental-distributed-tracing-instance-id"}, etcd: "Distributed tracing instance ID, must be unique per each etcd instance.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.tracing.instance }},
		{name: "distributed-tracing-sampling-rate", aliases: []string{"experimental-distributed-tracing-sampling-rate"}, def: "0", etcd: "Number of samples to collect per million spans for distributed tracing.", use: works,
			does: "as etcd: per million, of the calls whose caller's trace is not sampled already", bind: func(o *options) any { return &o.tracing.samplingRatePerMillion }},

		// Experimental features of etcd, most now feature gates.
		{name: "experimental-initial-corrupt-check", gate: "InitialCorruptCheck", def: "false", etcd: "Enable to check data corruption before serving any client/peer traffic.", use: works,
			does: "as etcd: a member compares its hash with the others' and exits on a mismatch; right after it catches up, so it may have answered a few requests", bind: func(o *options) any { return &o.initialCorruptCheck }},
		{name: "corrupt-check-time", aliases: []string{"experimental-corrupt-check-time"}, def: "1m", etcd: "Duration of time between cluster corruption check passes.", use: works,
			does: "the leader compares the members' hashes this often and raises CORRUPT for one differing from the majority (0: never; etcd's default is 0)", bind: func(o *options) any { return &o.corruptCheck }},
		{name: "experimental-compact-hash-check-enabled", gate: "CompactHashCheck", def: "false", etcd: "Enable leader to periodically check followers compaction hashes.", use: works,
			does: "corenode's periodic check (--corrupt-check-time) compares every member's hash at a common revision, which covers etcd's check at compactions; with --corrupt-check-time 0, this runs it every --compact-hash-check-time", bind: func(o *options) any { return &o.compactHashCheck }},
		{name: "compact-hash-check-time", aliases: []string{"experimental-compact-hash-check-time"}, def: "1m", etcd: "Duration of time between leader checks followers compaction hashes.", use: works,
			does: "see --experimental-compact-hash-check-enabled", bind: func(o *options) any { return &o.compactHashCheckTime }},
		{name: "experimental-enable-lease-checkpoint", gate: "LeaseCheckpoint", def: "true", etcd: "Enable leader to send regular checkpoints to other members to prevent reset of remaining TTL on leader change.", use: fixed, only: "true", kind: kBool,
			does: "corenode always checkpoints leases (--lease-checkpoint-after)"},
		{name: "experimental-enable-lease-checkpoint-persist", gate: "LeaseCheckpointPersist", def: "true", etcd: "Enable persisting remainingTTL to prevent indefinite auto-renewal of long lived leases.", use: fixed, only: "true", kind: kBool,
			does: "checkpoints are replicated state, kept across restarts"},
		{name: "compaction-batch-limit", aliases: []string{"experimental-compaction-batch-limit"}, def: "1000", etcd: "CompactionBatchLimit sets the maximum revisions deleted in each compaction batch.", use: noEffect, kind: kInt,
			does: "a compaction is one step in memory; there are no bbolt batches to size"},
		{name: "compaction-sleep-interval", aliases: []string{"experimental-compaction-sleep-interval"}, def: "10ms", etcd: "Sets the sleep interval between each compaction batch.", use: noEffect, kind: kDuration,
			does: "see --compaction-batch-limit"},
		{name: "peer-skip-client-san-verification", aliases: []string{"experimental-peer-skip-client-san-verification"}, def: "true", etcd: "Skip verification of SAN field in client certificate for peer connections.", use: fixed, only: "true", kind: kBool,
			does: "a member never checks the SAN of a peer's client certificate against its address (etcd's default does)"},
		{name: "watch-progress-notify-interval", aliases: []string{"experimental-watch-progress-notify-interval"}, def: transport.DefaultProgressNotifyInterval.String(), etcd: "Duration of periodical watch progress notification.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.watchProgressNotify }},
		{name: "warning-apply-duration", aliases: []string{"experimental-warning-apply-duration"}, def: "100ms", etcd: "Warning is generated if requests take more than this duration.", use: works,
			does: "as etcd: a KV call slower than this is logged (\"apply request took too long\"), timed over the whole call; 0 logs none", bind: func(o *options) any { return &o.warnApply }},
		{name: "experimental-txn-mode-write-with-shared-buffer", gate: "TxnModeWriteWithSharedBuffer", def: "true", etcd: "Enable the write transaction to use a shared buffer in its readonly check operations.", use: noEffect, kind: kBool,
			does: "corenode has no bbolt read buffers"},
		{name: "bootstrap-defrag-threshold-megabytes", aliases: []string{"experimental-bootstrap-defrag-threshold-megabytes"}, def: "0", etcd: "Enable the defrag during etcd server bootstrap on condition that it will free at least the provided threshold of disk space.", use: noEffect, kind: kInt,
			does: "corenode has no bbolt file to defragment"},
		{name: "max-learners", aliases: []string{"experimental-max-learners"}, def: strconv.Itoa(node.DefaultMaxLearners), etcd: "Set the max number of learner members allowed in the cluster membership.", use: works,
			does: "as etcd", bind: func(o *options) any { return &o.maxLearners }},
		{name: "downgrade-check-time", aliases: []string{"experimental-downgrade-check-time"}, def: "5s", etcd: "Duration of time between two downgrade status checks.", use: noEffect, kind: kDuration,
			does: "corenode has no cluster downgrade (etcdctl downgrade)"},
		{name: "snapshot-catchup-entries", aliases: []string{"experimental-snapshot-catchup-entries", "experimental-snapshot-catch-up-entries"}, def: "5000", etcd: "Number of entries for a slow follower to catch up after compacting the raft storage entries.", use: works,
			does: "as etcd: a snapshot truncates the raft log to its last this many entries (raft's TrailingLogs), so a follower up to that far behind catches up from the log rather than from a whole snapshot; at least 1", bind: func(o *options) any { return &o.snapshotCatchUp }},
		{name: "experimental-stop-grpc-service-on-defrag", gate: "StopGRPCServiceOnDefrag", def: "false", etcd: "Enable etcd gRPC service to stop serving client requests on defragmentation.", use: noEffect, kind: kBool,
			does: "Defragment has nothing to do in corenode, so serving never stops for it"},

		// Unsafe.
		{name: "force-new-cluster", def: "false", etcd: "Force to create a new one-member cluster.", use: works,
			does: "as etcd: this member's data as a one-member cluster, for one start after a lost quorum (see Losing members for good)",
			bind: func(o *options) any { return &o.forceNewCluster }},
		{name: "unsafe-no-fsync", def: "false", etcd: "Disables fsync, unsafe, will cause data loss.", use: works,
			does: "as etcd: the raft log, and raft's term and vote, are written without fsync (raft-wal's segments and meta database, or raft.db), with a warning at start; raft snapshots are still synced (raft's snapshot store cannot skip it; they come every --snapshot-count entries)", bind: func(o *options) any { return &o.unsafeNoFsync }},

		// Outside etcd's --help list.
		{name: "config-file", etcd: "Path to the server configuration file.", use: works,
			does: "etcd's YAML file; other flags and environment variables are then ignored (with a warning), as etcd", bind: func(o *options) any { return &o.configFile }},
		{name: "version", def: "false", etcd: "Print the version and exit.", use: works, bind: func(o *options) any { return &o.printVersion }},

		// corenode's own.
		{name: "commit-notify-interval", def: "0", use: own, bind: func(o *options) any { return &o.commitNotifyMS },
			does: "time (in milliseconds) between the empty appends an idle leader sends each follower (0: 50, or --heartbeat-interval if lower)"},
		{name: "log-store", def: "", use: own, bind: func(o *options) any { return &o.logStore },
			does: "raft log store, " + logstore.WAL + " or " + logstore.BoltDB + " (default: the one the data dir holds; " + logstore.Default + " for a new data dir)"},
		{name: "lease-checkpoint-after", def: "1000", use: own, bind: func(o *options) any { return &o.leaseCheckpointMS },
			does: "milliseconds a lease goes without keep-alive before the leader checkpoints its remaining TTL"},
		{name: "lease-tick", def: "100", use: own, bind: func(o *options) any { return &o.leaseTickMS },
			does: "milliseconds between the leader's lease-clock ticks and checkpoint batches"},
		{name: "lease-checkpoint-batch", def: "1000", use: own, bind: func(o *options) any { return &o.leaseBatch },
			does: "most leases in one checkpoint or expiry entry"},
		{name: "read-lease-duration", def: member.DefaultReadLeaseDuration.String(), use: own, bind: func(o *options) any { return &o.readLease },
			does: "read lease the leader grants to client/cache sessions; 0 grants none"},
		{name: "read-lease-max-keys", def: strconv.Itoa(member.DefaultReadLeaseMaxKeys), use: own, bind: func(o *options) any { return &o.readLeaseMaxKeys },
			does: "read leases the leader holds at once; past it, reads are answered without a lease"},
		{name: "read-lease-max-holders-per-key", def: strconv.Itoa(member.DefaultReadLeaseMaxHoldersPerKey), use: own, bind: func(o *options) any { return &o.readLeaseMaxHolders },
			does: "read-lease holders of one key; past it, reads of the key are answered without a lease"},
		{name: "dns-addr", def: "", use: own, bind: func(o *options) any { return &o.dns.Addr },
			does: "HOST:PORT to answer DNS on for services registered with corenode register (default: no DNS)"},
		{name: "dns-domain", def: "corenode.", use: own, bind: func(o *options) any { return &o.dns.Domain },
			does: "the DNS zone --dns-addr answers"},
		{name: "dns-ttl", def: "0s", use: own, bind: func(o *options) any { return &o.dns.TTL },
			does: "TTL of the DNS records (0: resolvers do not cache)"},
	}
}

// gateDef is one of etcd's feature gates that no flag sets (a gate that
// sets a flag is named in that flag's row, field gate). use is works,
// fixed or noEffect, as a flag's.
type gateDef struct {
	name string
	def  bool // etcd's default
	use  use
	only string // for fixed, the one value corenode honours
	does string
	set  func(o *options, on bool) // for works
}

// gatesWithoutFlag are etcd's feature gates (3.6's and 3.7's) that no flag
// sets.
var gatesWithoutFlag = []gateDef{
	{name: "SetMemberLocalAddr", use: works, set: func(o *options, on bool) { o.setMemberLocalAddr = on },
		does: "as etcd: dials the other members from the IP of the first --initial-advertise-peer-urls"},
	{name: "FastLeaseKeepAlive", def: true, use: fixed, only: "true",
		does: "as etcd with the gate on (its default): the leader renews without first waiting to apply what is committed; it confirms its leadership with a quorum (concurrent keep-alives share one confirmation), and a lease whose grant was answered was applied on the leader before the answer"},
	{name: "PriorityRequest", use: noEffect,
		does: "etcd 3.7's: a lease revoke may still be proposed when etcd refuses other requests with 'too many requests' for a backlog of committed entries not yet applied; corenode refuses no request for such a backlog"},
}

// betaGates are etcd's feature gates at beta, which AllBeta sets; all
// others are alpha, which AllAlpha sets.
var betaGates = map[string]bool{"TxnModeWriteWithSharedBuffer": true, "FastLeaseKeepAlive": true}

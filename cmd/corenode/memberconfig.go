package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/member"
)

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
	if o.snapshotCatchUp < 1 {
		return member.Config{}, fmt.Errorf("--snapshot-catchup-entries (%d) must be positive", o.snapshotCatchUp)
	}
	if o.maxSnapshots < 0 {
		return member.Config{}, fmt.Errorf("--max-snapshots (%d) must not be negative (0 keeps every snapshot)", o.maxSnapshots)
	}
	// etcd's 0 keeps every snapshot; the config's 0 is the default.
	maxSnapshots := o.maxSnapshots
	if maxSnapshots == 0 {
		maxSnapshots = -1
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
		ForceNewCluster:             o.forceNewCluster,
		UnsafeNoFsync:               o.unsafeNoFsync,
		MaxLearners:                 o.maxLearners,
		HeartbeatInterval:           time.Duration(o.heartbeatMS) * time.Millisecond,
		ElectionTimeout:             time.Duration(o.electionMS) * time.Millisecond,
		CommitNotifyInterval:        time.Duration(o.commitNotifyMS) * time.Millisecond,
		SnapshotCount:               uint64(o.snapshotCount),
		SnapshotCatchUpEntries:      uint64(o.snapshotCatchUp),
		MaxSnapshots:                maxSnapshots,
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

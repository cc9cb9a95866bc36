package main

import (
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/grpclog"

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
	case <-m.Halted():
		m.Close()
		return m.HaltErr()
	}
}

// start makes the logger the flags ask for, logs the warnings parsing
// gathered, and starts the member; closeAll flushes the traces and
// closes the log files.
func start(s *settings, metrics prometheus.Registerer, withLogger func(*slog.Logger)) (m *member.Member, logger *slog.Logger, closeAll func(), err error) {
	var rotate *rotation
	if s.o.logRotation {
		r, err := parseRotation(s.o.logRotationJSON)
		if err != nil {
			return nil, nil, nil, err
		}
		rotate = &r
	}
	logger, closeLog, err := newLogger(s.o.logger, s.o.logFormat, s.o.logLevel, s.o.logOutputs, rotate)
	if err != nil {
		return nil, nil, nil, err
	}
	setDefaultLogger(logger)
	if withLogger != nil {
		withLogger(logger)
	}
	s.logWarnings(logger)
	cfg, err := memberConfig(&s.o, logger)
	// The lease clock runs at a test's rate only under jepsen-lite's
	// clock-rate fault (testclock.go).
	clockCtx, stopClock := context.WithCancel(context.Background())
	if err == nil {
		cfg.LeaseClock, err = testClock(clockCtx, logger)
	}
	stopTracing := func(context.Context) error { return nil }
	if err == nil && s.o.tracing.enabled {
		var opt grpc.ServerOption
		if opt, stopTracing, err = newTracing(context.Background(), s.o.tracing); err == nil {
			cfg.GRPCServerOptions = append(cfg.GRPCServerOptions, opt)
		}
	}
	if err == nil && s.o.metrics == "extensive" && metrics != nil {
		err = exportRaftMetrics(metrics)
	}
	if err == nil {
		cfg.Metrics = metrics
		m, err = member.Start(cfg)
	}
	closeAll = func() {
		stopClock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(ctx); err != nil {
			logger.Warn("distributed tracing: flushing spans", "err", err)
		}
		closeLog()
	}
	if err != nil {
		// run prints err: one line, where an operator looks first.
		closeAll()
		return nil, nil, nil, err
	}
	return m, logger, closeAll, nil
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

// Command jepsen-lite runs a real corenode cluster (local processes behind a
// fault-injecting proxy, or the docker-compose deployment), drives it with
// concurrent etcd clients while injecting crashes, pauses, partitions, slow
// and lossy links and leadership moves, and checks the recorded history:
// linearizability (porcupine), no lost acknowledged write, watch
// completeness, and the lease promises of docs/leases.md. Election holder
// processes (client/election and, for comparison, concurrency.Election)
// are paused past their TTL and must not act once a successor has begun.
// Reader processes read registers through client/cache (read leases) and
// are paused past the read lease: every read, from memory or not, must be
// linearizable.
//
//	go run ./test/jepsen-lite -duration 60s
//	go run ./test/jepsen-lite -check /tmp/jepsen-lite-.../   # re-check a saved history
//
// The last line of the output is the verdict, e.g.
//
//	valid=true ops=12345 faults=17 anomalies=0
//
// and the exit status is 0 only when it says valid=true.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corenode/corenode/internal/rateclock"
	"github.com/corenode/corenode/test/jepsen-lite/internal/cachereader"
	"github.com/corenode/corenode/test/jepsen-lite/internal/cluster"
	"github.com/corenode/corenode/test/jepsen-lite/internal/holder"
	"github.com/corenode/corenode/test/jepsen-lite/internal/nemesis"
)

// Exit statuses.
const (
	exitValid     = 0
	exitAnomalies = 1 // the history shows the cluster misbehaved
	exitHarness   = 2 // the run itself failed (build, start, deadline)
	exitUnknown   = 3 // a checker could not decide
	exitSignal    = 130
)

type config struct {
	Duration     time.Duration `json:"duration"`
	Members      int           `json:"members"`
	Seed         uint64        `json:"seed"`
	Faults       string        `json:"faults"`
	Out          string        `json:"out"`
	Binary       string        `json:"binary"`
	Docker       bool          `json:"docker"`
	Compose      string        `json:"compose"`
	DockerImage  string        `json:"docker_image"`
	Grace        time.Duration `json:"grace"`
	OpTimeout    time.Duration `json:"op_timeout"`
	Clients      int           `json:"clients"`
	Keys         int           `json:"keys"`
	SetClients   int           `json:"set_clients"`
	LeaseClients int           `json:"lease_clients"`
	MinTTL       int64         `json:"min_ttl"`
	MaxTTL       int64         `json:"max_ttl"`
	CheckBudget  time.Duration `json:"check_budget"`
	RequireAll   bool          `json:"require_all_faults"`
	Holders      int           `json:"holders"`
	HolderModes  string        `json:"holder_modes"`
	HolderTTL    time.Duration `json:"holder_ttl"`
	CacheReaders int           `json:"cache_readers"`
	CacheWriters int           `json:"cache_writers"`
	CacheKeys    int           `json:"cache_keys"`
	ReadLease    time.Duration `json:"read_lease"`
	ClockSpread  float64       `json:"clock_rate_spread"`
	Auth         string        `json:"auth"`
	Check        string        `json:"-"`
	LogLevel     string        `json:"-"`
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("jepsen-lite", flag.ContinueOnError)
	fs.DurationVar(&c.Duration, "duration", 60*time.Second, "how long faults are injected and clients run")
	fs.IntVar(&c.Members, "members", 3, "cluster size: 3 or 5")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of the fault schedule and the clients' choices (0: from the clock; printed)")
	fs.StringVar(&c.Faults, "faults", "all", "comma-separated faults, \"all\" or \"none\"; known: "+kindsList())
	fs.StringVar(&c.Out, "out", "", "directory for the history, member logs and summary (default: a new temp dir)")
	fs.StringVar(&c.Binary, "binary", "", "corenode binary to run instead of building ./cmd/corenode")
	fs.BoolVar(&c.Docker, "docker", false, "run against deploy/docker-compose.yml instead of local processes")
	fs.StringVar(&c.Compose, "compose", "deploy/docker-compose.yml", "compose file for -docker, relative to the module root")
	fs.StringVar(&c.DockerImage, "docker-image", "", "image for -docker (default: build one from this tree with deploy/build, under a tag of the run's own)")
	fs.DurationVar(&c.Grace, "grace", 2*time.Minute, "hard deadline is -duration plus this, from start to exit, build included")
	fs.DurationVar(&c.OpTimeout, "op-timeout", 2*time.Second, "timeout of each client operation")
	fs.IntVar(&c.Clients, "clients", 5, "register (linearizability) clients")
	fs.IntVar(&c.Keys, "keys", 5, "register keys in use at once")
	fs.IntVar(&c.SetClients, "set-clients", 2, "set (lost-write) clients")
	fs.IntVar(&c.LeaseClients, "lease-clients", 4, "lease holders")
	fs.Int64Var(&c.MinTTL, "min-ttl", 3, "shortest lease TTL granted, seconds")
	fs.Int64Var(&c.MaxTTL, "max-ttl", 5, "longest lease TTL granted, seconds")
	fs.DurationVar(&c.CheckBudget, "check-budget", time.Minute, "time the linearizability search may take in all")
	fs.IntVar(&c.Holders, "holders", 3, "election holder processes per mode (0: no election workload)")
	fs.StringVar(&c.HolderModes, "holder-modes", strings.Join(holder.Modes(), ","), "comma-separated ways of electing, side by side: "+strings.Join(holder.Modes(), ", "))
	fs.DurationVar(&c.HolderTTL, "holder-ttl", 2*time.Second, "the election holders' session TTL (whole seconds, at least 2: the server raises shorter ones)")
	fs.IntVar(&c.CacheReaders, "cache-readers", 3, "cached-read reader processes, each reading through its own client/cache (0: no cached-read workload)")
	fs.IntVar(&c.CacheWriters, "cache-writers", 2, "writers of the cached-read workload's keys (KV puts)")
	fs.IntVar(&c.CacheKeys, "cache-keys", 3, "keys of the cached-read workload in use at once")
	fs.DurationVar(&c.ReadLease, "read-lease", time.Second, "the members' --read-lease-duration (local processes; -docker runs the image's default, "+cluster.DefaultSettings.ReadLease().String()+")")
	fs.Float64Var(&c.ClockSpread, "clock-rate-spread", 0.005, "the clock-rate fault runs each member's lease clock and each holder's and reader's clock at 1 plus or minus this (0.005: 0.5%)")
	fs.StringVar(&c.Auth, "auth", "", "turn auth on once the cluster is healthy and run every client as a user with readwrite on all keys (the nemesis as root): \"simple\" or \"jwt\" tokens (jwt: local processes only); \"\" for none")
	fs.BoolVar(&c.RequireAll, "require-all-faults", false, "fail the run unless every selected fault was injected at least once")
	fs.StringVar(&c.Check, "check", "", "re-check the history saved in this -out directory, without running a cluster")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.Members != 3 && c.Members != 5 {
		return nil, fmt.Errorf("-members %d: 3 or 5", c.Members)
	}
	if c.MinTTL < 2 || c.MaxTTL < c.MinTTL {
		return nil, fmt.Errorf("-min-ttl %d -max-ttl %d: need 2 <= min <= max (the server raises TTLs below 2 s)", c.MinTTL, c.MaxTTL)
	}
	if c.HolderTTL < 2*time.Second || c.HolderTTL%time.Second != 0 {
		return nil, fmt.Errorf("-holder-ttl %v: whole seconds, at least 2", c.HolderTTL)
	}
	if c.CacheReaders < 0 || c.CacheWriters < 0 || c.CacheReaders > 0 && c.CacheKeys < 1 {
		return nil, fmt.Errorf("-cache-readers %d -cache-writers %d -cache-keys %d: need readers, writers >= 0 and keys >= 1", c.CacheReaders, c.CacheWriters, c.CacheKeys)
	}
	if !(c.ClockSpread > 0 && c.ClockSpread <= 1-rateclock.MinRate) {
		return nil, fmt.Errorf("-clock-rate-spread %v: need 0 < spread <= %v (a rate clock runs at %v to %v)", c.ClockSpread, 1-rateclock.MinRate, rateclock.MinRate, rateclock.MaxRate)
	}
	if c.ReadLease < 200*time.Millisecond {
		return nil, fmt.Errorf("-read-lease %v: at least 200ms (the cache's drift margin is 1%% of it plus 50ms)", c.ReadLease)
	}
	switch {
	case c.Auth != "" && c.Auth != "simple" && c.Auth != "jwt":
		return nil, fmt.Errorf("-auth %q: simple, jwt or empty", c.Auth)
	case c.Auth == "jwt" && c.Docker:
		return nil, errors.New("-auth jwt: local processes only (the compose deployment has no key to sign with)")
	}
	if _, err := holderModes(c.HolderModes); err != nil {
		return nil, err
	}
	if _, err := nemesis.Parse(c.Faults); err != nil {
		return nil, err
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano()%1_000_000) + 1
	}
	return c, nil
}

// holderModes checks a -holder-modes list against the modes this binary
// has.
func holderModes(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	modes := strings.Split(s, ",")
	for _, m := range modes {
		if !slices.Contains(holder.Modes(), m) {
			return nil, fmt.Errorf("-holder-modes: unknown mode %q (known: %v)", m, holder.Modes())
		}
	}
	return modes, nil
}

// clockDir is where the rate files of the clock-rate fault live (""
// when it is not selected, or the members cannot take it: the compose file
// passes them no test clock).
func (c *config) clockDir() string {
	kinds, _ := nemesis.Parse(c.Faults)
	if c.Docker || !slices.Contains(kinds, nemesis.ClockRate) {
		return ""
	}
	return filepath.Join(c.Out, "clock")
}

// readLease is the read lease the members grant: -read-lease for local
// processes; the compose deployment passes no --read-lease-duration, so its
// members run corenode's default.
func (c *config) readLease() time.Duration {
	if c.Docker {
		return cluster.DefaultSettings.ReadLease()
	}
	return c.ReadLease
}

func kindsList() string {
	var s []string
	for _, k := range nemesis.All {
		s = append(s, string(k))
	}
	return strings.Join(s, ",")
}

func main() {
	// The election workload's holders and the cached-read workload's
	// readers are this binary again, so that they need no build of their
	// own.
	if len(os.Args) > 1 && os.Args[1] == holder.Command {
		os.Exit(holder.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == cachereader.Command {
		os.Exit(cachereader.Main(os.Args[2:]))
	}
	os.Exit(mainStatus())
}

func mainStatus() int {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-lite:", err)
		return exitHarness
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-lite: -log-level:", err)
		return exitHarness
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	if cfg.Check != "" {
		return recheck(cfg, log)
	}
	if cfg.Out == "" {
		cfg.Out, err = os.MkdirTemp("", "jepsen-lite-"+time.Now().Format("20060102-150405")+"-")
	} else {
		err = os.MkdirAll(cfg.Out, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-lite: -out:", err)
		return exitHarness
	}
	if cfg.Out, err = filepath.Abs(cfg.Out); err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-lite: -out:", err)
		return exitHarness
	}

	r := &runner{cfg: cfg, log: log, started: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// First SIGINT/SIGTERM: stop injecting, heal, check what we have.
	// Second: kill everything now.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		s := <-sigs
		log.Warn("signal: stopping the run (again to abort)", "signal", s)
		r.interrupted.Store(true)
		cancel()
		s = <-sigs
		r.abort(fmt.Sprintf("second signal %v", s), exitSignal)
	}()
	// The hard deadline, whatever hangs.
	deadline := time.AfterFunc(cfg.Duration+cfg.Grace, func() {
		r.abort(fmt.Sprintf("hard deadline of %v (duration %v + grace %v) exceeded", cfg.Duration+cfg.Grace, cfg.Duration, cfg.Grace), exitHarness)
	})
	defer deadline.Stop()

	status := r.run(ctx)
	if r.interrupted.Load() && status != exitAnomalies {
		status = exitSignal
	}
	return status
}

// abortOnce makes sure only one path prints the last line and exits.
var abortOnce sync.Once

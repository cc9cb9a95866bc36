package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

type command struct {
	name, help string
	// setup registers the command's own flags and returns its body.
	setup func(fs *flag.FlagSet) func(ctx context.Context, c *common) (*Result, error)
}

var commands = []command{
	{"put", "Put random keys (etcd's `benchmark put`)", setupPut},
	{"range", "Range one key, --consistency l (linearizable) or s (serializable)", setupRange},
	{"cached-range", "Range one key through a client-side cache: --cache corenode (read leases) or leasing (etcd's client/v3/leasing)", setupCachedRange},
	{"cached-put", "one writer puts a key that --holders caches read (and --dead-holder holds without answering): the write's cost of read leases", setupCachedPut},
	{"fanout-rtt", "one round trip to --conns clients at once (a progress request on each one's watch stream): cached-put's baseline for a write's round to its holders", setupFanout},
	{"lock", "acquire and release a clientv3 concurrency.Mutex (one session per client): the cost of a lock", setupLock},
	{"txn-put", "Txn with --txn-ops puts and no compares (etcd's `benchmark txn-put`)", setupTxnPut},
	{"lease-grant", "LeaseGrant", setupLeaseGrant},
	{"lease-keepalive", "KeepAliveOnce on pre-granted leases (etcd's `benchmark lease-keepalive`)", setupLeaseKeepAlive},
	{"follower-read", "one writer puts through the leader, then reads through a follower (--consistency l once, or s until it shows): how soon a follower serves a write", setupFollowerRead},
	{"watch", "one writer, many watchers on one key: put-send to watcher-receive latency", setupWatch},
	{"expiry", "many leases due together, one key each: lag from deadline to the DELETE a watcher sees", setupExpiry},
	{"failover", "SIGKILL the leader under continuous writes: time to the first acknowledged write (needs --pids)", setupFailover},
	{"idle-lease-memory", "RSS growth of the members per idle lease with one key (needs --pids)", setupIdleMemory},
	{"keys", "load --keys distinct keys: put throughput and latency while the state grows (snapshots included), RSS per key, a Range of every key (needs --pids); --verify only checks they are all there", setupKeys},
	{"lookup", "find one service's --endpoints-count endpoints: --via dns (SRV queries to a member's --dns-addr) or range-s/range-l (a prefix Range through the etcd API, decoded)", setupLookup},
	{"check-removal", "time from a failed health check of `corenode register --check-http` to the SRV record gone from --dns-addr", setupCheckRemoval},
	{"wait", "wait until every endpoint agrees on a leader and a write succeeds", setupWait},
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		os.Exit(2)
	}
	name, args := os.Args[1], os.Args[2:]
	if name == "compare" {
		if err := compareMain(args); err != nil {
			fmt.Fprintln(os.Stderr, "corebench compare:", err)
			os.Exit(1)
		}
		return
	}
	for _, cmd := range commands {
		if cmd.name == name {
			if err := runCommand(cmd, args); err != nil {
				fmt.Fprintf(os.Stderr, "corebench %s: %v\n", name, err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "corebench: unknown workload %q\n\n", name)
	usage()
	os.Exit(2)
}

func usage() {
	fmt.Fprintf(os.Stderr, "Usage: corebench WORKLOAD [flags]   (corebench WORKLOAD --help for its flags)\n"+
		"       corebench compare BASE.jsonl OTHER.jsonl\n\nWorkloads:\n")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-18s %s\n", c.name, c.help)
	}
}

// common holds the flags every workload shares; their names and defaults
// follow etcd's benchmark tool (100 clients over 10 connections).
type common struct {
	endpoints   []string
	conns       int
	clients     int
	system      string
	name        string
	jsonOut     bool
	timeout     time.Duration
	dialTimeout time.Duration
	pids        map[string]int
}

func runCommand(cmd command, args []string) error {
	fs := flag.NewFlagSet("corebench "+cmd.name, flag.ContinueOnError)
	var c common
	var endpoints, pids string
	progress := true
	fs.StringVar(&endpoints, "endpoints", "127.0.0.1:2379", "comma-separated gRPC endpoints; connection i dials endpoint i mod len, as etcd's benchmark does")
	fs.IntVar(&c.conns, "conns", 10, "number of gRPC connections (one client each)")
	fs.IntVar(&c.clients, "clients", 100, "number of concurrent workers, spread over the connections")
	fs.StringVar(&c.system, "system", "", "label for the system under test, recorded in the JSON (e.g. etcd, corenode)")
	fs.StringVar(&c.name, "name", "", "workload name in the output (default: the workload and its variant)")
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON line to stdout and the human summary to stderr")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up on the whole workload after this long")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 5*time.Second, "gRPC dial timeout")
	fs.StringVar(&pids, "pids", "", "endpoint=pid,... of the server processes (failover kills, idle-lease-memory reads /proc)")
	fs.BoolVar(&progress, "progress", true, "print progress to stderr every second")
	body := cmd.setup(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.endpoints = append(c.endpoints, e)
		}
	}
	if len(c.endpoints) == 0 {
		return errors.New("--endpoints is empty")
	}
	if c.conns < 1 || c.clients < 1 {
		return errors.New("--conns and --clients must be at least 1")
	}
	var err error
	if c.pids, err = parsePids(pids); err != nil {
		return err
	}
	if !progress {
		progressOut = nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	started := time.Now()
	res, err := body(ctx, &c)
	if res == nil {
		return err
	}
	res.System, res.Started = c.system, started
	if c.name != "" {
		res.Workload = c.name
	}
	res.Params = map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "json" && f.Name != "progress" && f.Name != "pids" {
			res.Params[f.Name] = f.Value.String()
		}
	})

	human := os.Stdout
	if c.jsonOut {
		human = os.Stderr
	}
	label := res.Workload
	if c.system != "" {
		label = c.system + " " + label
	}
	fmt.Fprintf(human, "\n=== %s\n%s", label, res.Text)
	if res.Errors > 0 {
		fmt.Fprintf(human, "\n%d operations failed\n", res.Errors)
	}
	if c.jsonOut {
		line, jerr := json.Marshal(res)
		if jerr != nil {
			return errors.Join(err, fmt.Errorf("encode result: %w", jerr))
		}
		fmt.Println(string(line))
	}
	// A partial result is still printed (the table shows what there is),
	// but the exit status says the run was not clean.
	return err
}

// parsePids reads endpoint=pid,...; endpoints are keyed without a scheme so
// http://127.0.0.1:2379 and 127.0.0.1:2379 are the same member.
func parsePids(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		ep, p, ok := strings.Cut(kv, "=")
		var pid int
		if _, err := fmt.Sscanf(p, "%d", &pid); !ok || err != nil || pid <= 0 {
			return nil, fmt.Errorf("--pids: %q is not endpoint=pid", kv)
		}
		out[endpointKey(ep)] = pid
	}
	return out, nil
}

func endpointKey(ep string) string {
	for _, scheme := range []string{"http://", "https://", "unix://"} {
		ep = strings.TrimPrefix(ep, scheme)
	}
	return strings.TrimSuffix(ep, "/")
}

// membersAndLeader returns the pid of every endpoint and the current
// leader: what the workloads that read /proc or kill the leader start from.
func (c *common) membersAndLeader(ctx context.Context) (map[string]int, memberStatus, error) {
	pids, err := c.pidsFor(c.endpoints)
	if err != nil {
		return nil, memberStatus{}, err
	}
	leader, err := findLeader(ctx, c, c.endpoints)
	if err != nil {
		return nil, memberStatus{}, err
	}
	return pids, leader, nil
}

// pidsFor returns the pid of every endpoint, or an error naming the
// endpoints --pids does not cover.
func (c *common) pidsFor(endpoints []string) (map[string]int, error) {
	out := map[string]int{}
	var missing []string
	for _, ep := range endpoints {
		pid, ok := c.pids[endpointKey(ep)]
		if !ok {
			missing = append(missing, ep)
			continue
		}
		out[ep] = pid
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("--pids has no pid for %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// Package cachereader is the program of one reader of the cached-read
// workload: a separate process (jepsen-lite re-executed with the hidden
// "cache-reader" subcommand) with its own etcd client and client/cache
// Cache, which reads the keys it is told to, one at a time, through the
// cache, and reports each read as a JSON line on stdout.
//
// It is a process of its own so that the nemesis can SIGSTOP it for longer
// than the read lease, as a GC pause or a stalled VM would stop a real
// client, while the cluster and the writers go on: when it wakes, its cache
// must not answer from an entry whose lease ran out meanwhile.
//
// The protocol is one JSON Request per line on stdin, answered by one JSON
// Result per line on stdout; the reader exits when stdin ends.
package cachereader

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/corenode/corenode/client/cache"
	"github.com/corenode/corenode/internal/rateclock"
	"github.com/corenode/corenode/test/jepsen-lite/internal/cluster"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// Command is the hidden subcommand of jepsen-lite that runs a reader.
const Command = "cache-reader"

// Exit statuses of a reader process.
const (
	ExitDone  = 0 // stdin ended
	ExitError = 2 // bad flags, no client, stdout gone
)

// Request asks the reader to read Key.
type Request struct {
	Key string `json:"key"`
}

// Result is one read. Start and End are CLOCK_MONOTONIC readings
// (history.Mono), comparable across processes on one machine: Start read
// just before Cache.Get was called, End just after it returned, so a pause
// of the process anywhere in between lies within [Start, End].
type Result struct {
	Key   string `json:"key"`
	Start int64  `json:"start"`
	End   int64  `json:"end"`
	Found bool   `json:"found,omitempty"`
	Value string `json:"value,omitempty"`
	Rev   int64  `json:"rev,omitempty"` // mod revision; 0 when not found
	// Hit: the cache answered from memory (its Hits counter grew).
	Hit bool   `json:"hit,omitempty"`
	Err string `json:"err,omitempty"`
	// Stats are the cache's counters after this read.
	Stats history.CacheStats `json:"stats"`
}

// Config is a reader's flags.
type Config struct {
	Endpoints []string      // corenode client addresses
	Name      string        // for its log
	Timeout   time.Duration // of each Get
	// ClockFile, if set, is a rate file (internal/rateclock): the cache
	// judges its leases on a clock running at the rate in it, which the
	// clock-rate fault changes.
	ClockFile string
}

// Args is the command line that runs a reader with cfg (after Command).
func (c Config) Args() []string {
	return []string{"-endpoints", strings.Join(c.Endpoints, ","), "-name", c.Name, "-timeout", c.Timeout.String(),
		"-clock-file", c.ClockFile}
}

func parse(args []string) (Config, error) {
	var c Config
	var endpoints string
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.StringVar(&endpoints, "endpoints", "", "comma-separated client addresses")
	fs.StringVar(&c.Name, "name", "", "name of this reader, for its log")
	fs.DurationVar(&c.Timeout, "timeout", 2*time.Second, "timeout of each read")
	fs.StringVar(&c.ClockFile, "clock-file", "", "rate file of the cache's clock (internal/rateclock); \"\": the real clock")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if endpoints == "" || c.Name == "" {
		return c, errors.New("cache-reader: -endpoints and -name are required")
	}
	if c.Timeout <= 0 {
		return c, fmt.Errorf("cache-reader: -timeout %v: must be positive", c.Timeout)
	}
	c.Endpoints = strings.Split(endpoints, ",")
	return c, nil
}

// Main runs a reader with the arguments after Command and returns its exit
// status. Requests come on stdin, results go to stdout, logs to stderr.
func Main(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := parse(args)
	if err != nil {
		log.Error("cache-reader", "err", err)
		return ExitError
	}
	log = log.With("name", cfg.Name)
	var opts []cache.Option
	if cfg.ClockFile != "" {
		clk, err := rateclock.FromEnv(context.Background(), "file:"+cfg.ClockFile, func(err error) { log.Error("reader clock", "err", err) })
		if err != nil {
			log.Error("cache-reader", "err", err)
			return ExitError
		}
		opts = append(opts, cache.WithClock(clk))
	}
	cli, err := cluster.NewClient(cfg.Endpoints)
	if err != nil {
		log.Error("cache-reader", "err", err)
		return ExitError
	}
	defer cli.Close()
	c, err := cache.New(cli, opts...)
	if err != nil {
		log.Error("cache-reader", "err", err)
		return ExitError
	}
	defer c.Close()
	log.Info("reading", "endpoints", cfg.Endpoints)
	if err := Serve(c, os.Stdin, os.Stdout, cfg.Timeout); err != nil {
		log.Error("cache-reader", "err", err)
		return ExitError
	}
	log.Info("stdin ended", "stats", fmt.Sprintf("%+v", c.Stats()))
	return ExitDone
}

// Serve reads each requested key through c, one at a time, and writes a
// Result for each, until in ends (nil) or fails.
func Serve(c *cache.Cache, in io.Reader, out io.Writer, timeout time.Duration) error {
	dec := json.NewDecoder(in)
	enc := json.NewEncoder(out)
	for {
		var req Request
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("cache-reader: decode request: %w", err)
		}
		if err := enc.Encode(Read(c, req.Key, timeout)); err != nil {
			return fmt.Errorf("cache-reader: write result: %w", err)
		}
	}
}

// Read is one Get of key through c, timed. Only this goroutine calls Get,
// so the Hits counter grows during the call exactly when this Get was a
// hit.
func Read(c *cache.Cache, key string, timeout time.Duration) Result {
	hits := c.Stats().Hits
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// The invocation: read before Get is called. A pause of this process
	// from here on lies within the read.
	start := history.Mono()
	kv, err := c.Get(ctx, key)
	end := history.Mono()
	st := c.Stats()
	r := Result{Key: key, Start: start, End: end, Hit: st.Hits > hits, Stats: history.CacheStats{
		Hits: st.Hits, Misses: st.Misses, Uncached: st.Uncached,
		Invalidations: st.Invalidations, Evictions: st.Evictions, Reconnects: st.Reconnects,
	}}
	switch {
	case err != nil:
		r.Err = err.Error()
	case kv != nil:
		r.Found, r.Value, r.Rev = true, string(kv.Value), kv.ModRevision
	}
	return r
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// setupKeys measures a member at scale: it writes --keys distinct keys
// (etcd's benchmark key shape, in order, so each write adds a key), and
// reports the write rate and latency over the whole load, which includes
// every snapshot the members take as the state grows; how much each
// member's resident set grew per key; and how long one Range of every key
// with its value takes. scripts/bench-vs-etcd then restarts the whole
// cluster and runs it again with --verify, which only checks that every
// key came back.
func setupKeys(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	var k keyOpts
	k.register(fs)
	n := fs.Int("keys", 100000, "number of distinct keys to write")
	settle := fs.Duration("settle", 5*time.Second, "wait before each RSS reading, so background work (snapshots, GC) settles")
	verify := fs.Bool("verify", false, "write nothing: check that the cluster holds --keys keys (after a restart)")
	return func(ctx context.Context, c *common) (*Result, error) {
		if *n < 1 {
			return nil, errors.New("--keys must be positive")
		}
		k.keySpace, k.sequential = *n, true
		if err := k.check(); err != nil {
			return nil, err
		}
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		if *verify {
			return nil, countKeys(ctx, clis[0], *n, k)
		}
		pids, leader, err := c.membersAndLeader(ctx)
		if err != nil {
			return nil, err
		}
		if err := sleepCtx(ctx, *settle); err != nil {
			return nil, err
		}
		before, err := rssAll(pids)
		if err != nil {
			return nil, err
		}
		val := k.value()
		s := runOps(ctx, "keys", clis, c.clients, int64(*n), func(ctx context.Context, cli *clientv3.Client, i int64) error {
			_, err := cli.Put(ctx, k.key(i), val)
			return err
		})
		if s.NErr > 0 {
			return nil, fmt.Errorf("%d of %d puts failed, e.g. %s", s.NErr, *n, firstError(s))
		}
		if err := sleepCtx(ctx, *settle); err != nil {
			return nil, err
		}
		after, err := rssAll(pids)
		if err != nil {
			return nil, err
		}

		r := &Result{Workload: "keys"}
		r.add("rps", s.RPS(), "req/s", "higher", true)
		r.addLatency("", s)
		var b strings.Builder
		fmt.Fprintf(&b, "%d keys of %d bytes with %d-byte values, written in %.1fs\n", *n, k.keySize, k.valSize, s.Wall.Seconds())
		s.writeSummary(&b, "Requests")
		fmt.Fprintf(&b, "\nRSS after %v settling:\n", *settle)
		addGrowth(r, &b, pids, before, after, leader.endpoint, float64(*n), "key")
		r.add("member_avg_rss_mib", float64(sumOf(after))/float64(len(after))/(1<<20), "MiB", "lower", false)

		start := time.Now()
		if err := countKeys(ctx, clis[0], *n, k); err != nil {
			return r, err
		}
		took := time.Since(start)
		r.add("range_all_s", took.Seconds(), "s", "lower", true)
		fmt.Fprintf(&b, "one linearizable Range of all %d keys with their values: %.2fs\n", *n, took.Seconds())
		r.Text = b.String()
		return r, ctx.Err()
	}
}

// countKeys reads every key the keys workload wrote, values included, in
// one Range, and checks that none is missing or changed.
func countKeys(ctx context.Context, cli *clientv3.Client, n int, k keyOpts) error {
	// Varint keys do not sort in write order, so read the whole key space
	// and pick out the workload's keys by their size.
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		return fmt.Errorf("range every key: %w", err)
	}
	want := k.value()
	found := 0
	for _, kv := range resp.Kvs {
		if len(kv.Key) != k.keySize || string(kv.Key) == readyKey {
			continue
		}
		if string(kv.Value) != want {
			return fmt.Errorf("key %q holds %d bytes, not the %d written", kv.Key, len(kv.Value), len(want))
		}
		found++
	}
	if found != n {
		return fmt.Errorf("the cluster holds %d of the %d keys written", found, n)
	}
	return nil
}

func sumOf(m map[string]int64) int64 {
	var t int64
	for _, v := range m {
		t += v
	}
	return t
}

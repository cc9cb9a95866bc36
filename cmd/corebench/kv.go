package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// keyOpts are etcd's key and value shape flags: fixed-size binary keys
// holding a varint drawn from the key space.
type keyOpts struct {
	keySize, valSize, keySpace int
	sequential                 bool
}

func (k *keyOpts) register(fs *flag.FlagSet) {
	fs.IntVar(&k.keySize, "key-size", 8, "key size in bytes")
	fs.IntVar(&k.valSize, "val-size", 8, "value size in bytes")
	fs.IntVar(&k.keySpace, "key-space-size", 1, "number of distinct keys")
	fs.BoolVar(&k.sequential, "sequential-keys", false, "use keys in order instead of at random")
}

func (k *keyOpts) check() error {
	if k.keySize < 1 || k.keySpace < 1 || k.valSize < 0 {
		return errors.New("--key-size and --key-space-size must be at least 1, --val-size at least 0")
	}
	// Keys are zigzag varints: 7 bits per byte, one of them the sign.
	if k.keySize < binary.MaxVarintLen64 && k.keySpace > 1<<(7*k.keySize-1) {
		return fmt.Errorf("--key-size %d cannot hold --key-space-size %d distinct keys", k.keySize, k.keySpace)
	}
	return nil
}

func (k *keyOpts) key(i int64) string {
	b := make([]byte, k.keySize)
	n := int64(rand.IntN(k.keySpace))
	if k.sequential {
		n = i % int64(k.keySpace)
	}
	binary.PutVarint(b, n)
	return string(b)
}

func (k *keyOpts) value() string { return strings.Repeat("v", k.valSize) }

// opsResult turns a closed-loop run into a Result: throughput and latency
// metrics and etcd's summary text.
func opsResult(ctx context.Context, workload string, total int64, s stats) (*Result, error) {
	r := &Result{Workload: workload}
	r.add("rps", s.RPS(), "req/s", "higher", true)
	r.addLatency("", s)
	r.addErrors(s)
	var b strings.Builder
	s.writeSummary(&b, "Requests")
	r.Text = b.String()
	if err := ctx.Err(); err != nil {
		return r, fmt.Errorf("stopped after %d of %d requests: %w", s.Count()+s.NErr, total, err)
	}
	if s.Count() == 0 {
		return r, errors.New("every request failed")
	}
	return r, nil
}

func setupPut(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	var k keyOpts
	k.register(fs)
	total := fs.Int64("total", 10000, "total number of put requests")
	to := fs.String("to", "any", "which members the connections dial: any (connection i dials endpoint i mod len, as etcd's benchmark does), leader, or follower (the first endpoint that is not the leader)")
	return func(ctx context.Context, c *common) (*Result, error) {
		if err := k.check(); err != nil {
			return nil, err
		}
		eps, err := endpointsTo(ctx, c, *to)
		if err != nil {
			return nil, err
		}
		clis, err := connect(ctx, c, eps, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		val := k.value()
		s := runOps(ctx, "put", clis, c.clients, *total, func(ctx context.Context, cli *clientv3.Client, i int64) error {
			_, err := cli.Put(ctx, k.key(i), val)
			return err
		})
		return opsResult(ctx, "put", *total, s)
	}
}

func setupRange(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	key := fs.String("key", "/corebench/range", "key to read; it is written once before the run")
	valSize := fs.Int("val-size", 8, "size of the value written to --key before the run")
	consistency := fs.String("consistency", "l", "l for linearizable reads, s for serializable ones")
	total := fs.Int64("total", 10000, "total number of range requests")
	return func(ctx context.Context, c *common) (*Result, error) {
		var opts []clientv3.OpOption
		name := "range-linearizable"
		switch *consistency {
		case "l":
		case "s":
			opts = append(opts, clientv3.WithSerializable())
			name = "range-serializable"
		default:
			return nil, fmt.Errorf("--consistency %q: want l or s", *consistency)
		}
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		if _, err := clis[0].Put(ctx, *key, strings.Repeat("v", *valSize)); err != nil {
			return nil, fmt.Errorf("write %s before the run: %w", *key, err)
		}
		// A serializable read on a follower may not see that write yet;
		// wait until each connection's member has it, so every read
		// returns the same value for both systems.
		for _, cli := range clis {
			for {
				resp, err := cli.Get(ctx, *key, clientv3.WithSerializable())
				if err != nil {
					return nil, fmt.Errorf("read %s before the run: %w", *key, err)
				}
				if len(resp.Kvs) == 1 {
					break
				}
				if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
					return nil, err
				}
			}
		}
		s := runOps(ctx, name, clis, c.clients, *total, func(ctx context.Context, cli *clientv3.Client, i int64) error {
			_, err := cli.Get(ctx, *key, opts...)
			return err
		})
		return opsResult(ctx, name, *total, s)
	}
}

func setupTxnPut(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	var k keyOpts
	k.register(fs)
	total := fs.Int64("total", 10000, "total number of txn requests")
	ops := fs.Int("txn-ops", 1, "number of puts in each txn")
	return func(ctx context.Context, c *common) (*Result, error) {
		if err := k.check(); err != nil {
			return nil, err
		}
		if *ops < 1 {
			return nil, errors.New("--txn-ops must be at least 1")
		}
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		val := k.value()
		s := runOps(ctx, "txn-put", clis, c.clients, *total, func(ctx context.Context, cli *clientv3.Client, i int64) error {
			puts := make([]clientv3.Op, *ops)
			for j := range puts {
				puts[j] = clientv3.OpPut(k.key(i*int64(*ops)+int64(j)), val)
			}
			_, err := cli.Txn(ctx).Then(puts...).Commit()
			return err
		})
		return opsResult(ctx, "txn-put", *total, s)
	}
}

func setupLeaseGrant(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	total := fs.Int64("total", 10000, "total number of grants")
	ttl := fs.Int64("ttl", 60, "TTL of each lease in seconds; long enough that none expires during the run")
	return func(ctx context.Context, c *common) (*Result, error) {
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		s := runOps(ctx, "lease-grant", clis, c.clients, *total, func(ctx context.Context, cli *clientv3.Client, i int64) error {
			_, err := cli.Grant(ctx, *ttl)
			return err
		})
		return opsResult(ctx, "lease-grant", *total, s)
	}
}

func setupLeaseKeepAlive(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	total := fs.Int64("total", 10000, "total number of keep-alives")
	leases := fs.Int("leases", 0, "leases granted before the run and kept alive in turn (default: one per client, as etcd's benchmark)")
	ttl := fs.Int64("ttl", 100, "TTL of the leases in seconds")
	return func(ctx context.Context, c *common) (*Result, error) {
		n := *leases
		if n <= 0 {
			n = c.clients
		}
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		ids := make([]clientv3.LeaseID, n)
		gs := runOps(ctx, "lease-keepalive grant", clis, c.clients, int64(n), func(ctx context.Context, cli *clientv3.Client, i int64) error {
			g, err := cli.Grant(ctx, *ttl)
			if err != nil {
				return err
			}
			ids[i] = g.ID
			return nil
		})
		if gs.NErr > 0 {
			return nil, fmt.Errorf("granting %d leases before the run: %d failed, e.g. %v", n, gs.NErr, firstError(gs))
		}
		// KeepAliveOnce opens a stream, sends one request and reads one
		// answer: etcd's benchmark measures exactly this unary use.
		s := runOps(ctx, "lease-keepalive", clis, c.clients, *total, func(ctx context.Context, cli *clientv3.Client, i int64) error {
			_, err := cli.KeepAliveOnce(ctx, ids[i%int64(n)])
			return err
		})
		return opsResult(ctx, "lease-keepalive", *total, s)
	}
}

func firstError(s stats) string {
	for k := range s.Errors {
		return k
	}
	return "no error text"
}

// setupWait is for scripts: it returns once every endpoint reports the same
// leader and a write through each endpoint succeeds, i.e. the cluster can
// serve a benchmark.
func setupWait(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	return func(ctx context.Context, c *common) (*Result, error) {
		var last error
		for {
			if last = ready(ctx, c); last == nil {
				return nil, nil
			}
			if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
				return nil, fmt.Errorf("cluster not ready after %v: %w", c.timeout, last)
			}
		}
	}
}

// readyKey is what wait writes through every member.
const readyKey = "/corebench/ready"

func ready(ctx context.Context, c *common) error {
	var leader uint64
	for _, st := range statusAll(ctx, c, c.endpoints, time.Second) {
		switch {
		case st.err != nil:
			return st.err
		case st.leader == 0:
			return fmt.Errorf("%s has no leader", st.endpoint)
		case leader != 0 && st.leader != leader:
			return fmt.Errorf("members disagree on the leader (%x, %x)", leader, st.leader)
		}
		leader = st.leader
	}
	for _, ep := range c.endpoints {
		cli, err := newClient(c, ep)
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = cli.Put(pctx, readyKey, ep)
		cancel()
		cli.Close()
		if err != nil {
			return fmt.Errorf("write through %s: %w", ep, err)
		}
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/leasing"

	"github.com/corenode/corenode/api/cachepb"
	"github.com/corenode/corenode/client/cache"
)

// cachedGet is one connection's reader through a client-side cache.
type cachedGet struct {
	get   func(ctx context.Context, key string) error
	close func()
}

func setupCachedRange(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	key := fs.String("key", "/corebench/cached", "key to read; it is written once before the run")
	valSize := fs.Int("val-size", 8, "size of the value written to --key before the run")
	kind := fs.String("cache", "corenode", "corenode (client/cache: corenode's read leases) or leasing (etcd's client/v3/leasing, works on etcd and corenode)")
	total := fs.Int64("total", 1000000, "total number of reads")
	return func(ctx context.Context, c *common) (*Result, error) {
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		if _, err := clis[0].Put(ctx, *key, strings.Repeat("v", *valSize)); err != nil {
			return nil, fmt.Errorf("write %s before the run: %w", *key, err)
		}
		readers := map[*clientv3.Client]cachedGet{}
		defer func() {
			for _, r := range readers {
				r.close()
			}
		}()
		for _, cli := range clis {
			r, err := newCachedGet(ctx, *kind, cli)
			if err != nil {
				return nil, err
			}
			readers[cli] = r
		}
		name := "cached-range-" + *kind
		s := runOps(ctx, name, clis, c.clients, *total, func(ctx context.Context, cli *clientv3.Client, i int64) error {
			return readers[cli].get(ctx, *key)
		})
		return opsResult(ctx, name, *total, s)
	}
}

func newCachedGet(ctx context.Context, kind string, cli *clientv3.Client) (cachedGet, error) {
	switch kind {
	case "corenode":
		c, err := cache.New(cli)
		if err != nil {
			return cachedGet{}, err
		}
		return cachedGet{
			get: func(ctx context.Context, key string) error {
				kv, err := c.Get(ctx, key)
				if err == nil && kv == nil {
					err = errors.New("the key is missing")
				}
				return err
			},
			close: func() { c.Close() },
		}, nil
	case "leasing":
		kv, closeKV, err := leasing.NewKV(cli, "/corebench/leasing/")
		if err != nil {
			return cachedGet{}, fmt.Errorf("leasing: %w", err)
		}
		return cachedGet{
			get: func(ctx context.Context, key string) error {
				resp, err := kv.Get(ctx, key)
				if err == nil && len(resp.Kvs) == 0 {
					err = errors.New("the key is missing")
				}
				return err
			},
			close: closeKV,
		}, nil
	}
	return cachedGet{}, fmt.Errorf("--cache %q: want corenode or leasing", kind)
}

// setupCachedPut measures what read leases cost writers: one writer puts a
// key, one put at a time, while --holders caches keep reading it (each put
// waits for their invalidations' round trips), or while a holder that
// never answers re-reads it after every put (each put waits for its lease
// to run out). --holders 0 is the uncached baseline.
func setupCachedPut(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	key := fs.String("key", "/corebench/cached-put", "key written (and read by the holders)")
	holders := fs.Int("holders", 10, "caches reading the key throughout, spread over the connections (0: none, the uncached baseline)")
	dead := fs.Bool("dead-holder", false, "add a holder that takes a lease after every put and never answers an invalidation")
	total := fs.Int64("total", 300, "puts")
	holderInterval := fs.Duration("holder-interval", time.Millisecond, "pause between a holder's reads: holders in a tight loop of cache hits would take the CPU from the members on a small machine")
	interval := fs.Duration("put-interval", 20*time.Millisecond, "pause between puts (the holders re-read at once after each, so back-to-back puts would measure a read storm)")
	return func(ctx context.Context, c *common) (*Result, error) {
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		if _, err := clis[0].Put(ctx, *key, "0"); err != nil {
			return nil, fmt.Errorf("write %s before the run: %w", *key, err)
		}
		rctx, stopReaders := context.WithCancel(ctx)
		var readers sync.WaitGroup
		defer readers.Wait()
		defer stopReaders()
		for h := range *holders {
			cc, err := cache.New(clis[h%len(clis)])
			if err != nil {
				return nil, err
			}
			readers.Go(func() {
				defer cc.Close()
				for rctx.Err() == nil {
					cc.Get(rctx, *key)
					sleepCtx(rctx, *holderInterval)
				}
			})
		}
		var silent *silentHolder
		if *dead {
			if silent, err = newSilentHolder(rctx, clis[0], *key); err != nil {
				return nil, err
			}
		}
		// Let every holder take its lease before the first put.
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("cached-put-%d-holders", *holders)
		if *dead {
			name += "-1-dead"
		}
		// Only the put is timed: not the pause, nor the silent holder's read.
		var prepare func() error
		if silent != nil {
			prepare = silent.lease
		}
		var i int
		return paced(ctx, name, *total, *interval, prepare, func() error {
			i++
			_, err := clis[0].Put(ctx, *key, fmt.Sprint(i))
			return err
		})
	}
}

// paced runs op total times, one at a time, each after a pause of interval
// and after prepare (when not nil; its error ends the run), and times op
// alone.
func paced(ctx context.Context, name string, total int64, interval time.Duration, prepare, op func() error) (*Result, error) {
	var rec recorder
	prog := startProgress(name, total, &rec.done, &rec.failed)
	defer prog.stop()
	began := time.Now()
	var lats []time.Duration
	for i := int64(0); i < total && ctx.Err() == nil; i++ {
		if err := sleepCtx(ctx, interval); err != nil {
			break
		}
		if prepare != nil {
			if err := prepare(); err != nil {
				return nil, err
			}
		}
		t := time.Now()
		if err := op(); err != nil {
			rec.fail(err)
		} else {
			lats = append(lats, time.Since(t))
		}
		rec.done.Add(1)
	}
	prog.stop()
	rec.merge(lats)
	return opsResult(ctx, name, total, rec.stats(time.Since(began)))
}

// silentHolder holds a read lease and never answers an invalidation, as a
// paused or partitioned client would not.
type silentHolder struct {
	stream cachepb.Cache_SessionClient
	key    []byte
	id     uint64
}

func newSilentHolder(ctx context.Context, cli *clientv3.Client, key string) (*silentHolder, error) {
	stream, err := cachepb.NewCacheClient(cli.ActiveConnection()).Session(ctx)
	if err != nil {
		return nil, fmt.Errorf("silent holder: %w", err)
	}
	return &silentHolder{stream: stream, key: []byte(key)}, nil
}

// lease asks for the key and waits for the answer, skipping invalidations.
func (s *silentHolder) lease() error {
	s.id++
	if err := s.stream.Send(&cachepb.SessionRequest{Msg: &cachepb.SessionRequest_Get{Get: &cachepb.GetRequest{Id: s.id, Key: s.key}}}); err != nil {
		return fmt.Errorf("silent holder: %w", err)
	}
	for {
		m, err := s.stream.Recv()
		if err != nil {
			return fmt.Errorf("silent holder: %w", err)
		}
		if g := m.GetGet(); g != nil && g.Id == s.id {
			if g.LeaseMs == 0 {
				return errors.New("silent holder: the leader granted no lease")
			}
			return nil
		}
	}
}

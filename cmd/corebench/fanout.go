package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// setupFanout measures one round trip to many clients at once: each of
// --conns clients holds a watch stream, all send a progress request
// together every --interval, and a round ends when the last answer
// arrives. A write of a key that N caches hold waits for a round of the
// same shape (one message on each holder's stream, one back), so this is
// cached-put's baseline on the machine at hand: run it with --endpoints
// the leader and --conns the number of holders.
func setupFanout(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	total := fs.Int64("total", 300, "rounds")
	interval := fs.Duration("interval", 20*time.Millisecond, "pause between rounds (as cached-put's --put-interval)")
	return func(ctx context.Context, c *common) (*Result, error) {
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		watches := make([]clientv3.WatchChan, len(clis))
		for i, cli := range clis {
			watches[i] = cli.Watch(wctx, "/corebench/fanout", clientv3.WithCreatedNotify())
			if r, ok := <-watches[i]; !ok || !r.Created {
				return nil, fmt.Errorf("watch on connection %d: %v", i, r.Err())
			}
		}
		return paced(ctx, fmt.Sprintf("fanout-rtt-%d", len(clis)), *total, *interval, nil, func() error {
			errs := make([]error, len(clis))
			var wg sync.WaitGroup
			for j, cli := range clis {
				wg.Go(func() { errs[j] = ping(wctx, cli, watches[j]) })
			}
			wg.Wait()
			return errors.Join(errs...)
		})
	}
}

// ping sends a progress request on the watch stream of ctx and waits for
// its answer.
func ping(ctx context.Context, cli *clientv3.Client, wch clientv3.WatchChan) error {
	if err := cli.RequestProgress(ctx); err != nil {
		return fmt.Errorf("progress request: %w", err)
	}
	for r := range wch {
		if err := r.Err(); err != nil {
			return err
		}
		if r.IsProgressNotify() {
			return nil
		}
	}
	return errors.New("watch ended")
}

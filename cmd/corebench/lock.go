package main

import (
	"context"
	"flag"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// setupLock is the lock workload: each operation acquires and releases a
// clientv3 concurrency.Mutex, the way a service takes a lock. With one
// client it is the latency of an uncontended lock: Lock is one Txn (create
// the waiter key under the session's lease and read the oldest waiter),
// Unlock a Delete, so two writes in a row per operation.
func setupLock(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	total := fs.Int64("total", 1000, "total number of acquire-release pairs")
	to := fs.String("to", "any", "which members the connections dial: any, leader, or follower (as put's --to)")
	prefix := fs.String("key", "/corebench/lock", "the mutex's key prefix, shared by every client (more than one client contend)")
	ttl := fs.Int("ttl", 60, "each client's session TTL in seconds")
	return func(ctx context.Context, c *common) (*Result, error) {
		eps, err := endpointsTo(ctx, c, *to)
		if err != nil {
			return nil, err
		}
		clis, err := connect(ctx, c, eps, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		// One session (a lease kept alive) per client, granted before the
		// run; an operation takes any free one, and there is one per worker.
		sessions := make(chan *concurrency.Session, c.clients)
		defer func() {
			close(sessions)
			for s := range sessions {
				s.Close()
			}
		}()
		for w := range c.clients {
			s, err := concurrency.NewSession(clis[w%len(clis)], concurrency.WithTTL(*ttl), concurrency.WithContext(ctx))
			if err != nil {
				return nil, fmt.Errorf("session for client %d: %w", w, err)
			}
			sessions <- s
		}
		st := runOps(ctx, "lock", clis, c.clients, *total, func(ctx context.Context, _ *clientv3.Client, _ int64) error {
			s := <-sessions
			defer func() { sessions <- s }()
			m := concurrency.NewMutex(s, *prefix)
			if err := m.Lock(ctx); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			if err := m.Unlock(ctx); err != nil {
				return fmt.Errorf("unlock: %w", err)
			}
			return nil
		})
		return opsResult(ctx, "lock", *total, st)
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// setupWatch is etcd's `benchmark watch-latency`: one writer puts to one
// key at a fixed rate while streams×watchers-per-stream watchers watch it;
// each delivery's latency runs from the moment the put was sent to the
// moment a watcher receives the event, all on this process's monotonic clock.
func setupWatch(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	puts := fs.Int("puts", 100, "number of puts by the writer")
	rate := fs.Float64("put-rate", 100, "puts per second; a paced writer keeps queueing out of the latency")
	streams := fs.Int("streams", 10, "watch streams, spread over the connections")
	perStream := fs.Int("watchers-per-stream", 10, "watchers on each stream, all on the same key")
	valSize := fs.Int("val-size", 8, "value size in bytes (at least enough for the put's index)")
	drain := fs.Duration("drain-timeout", 30*time.Second, "how long after the last put to wait for every watcher")
	return func(ctx context.Context, c *common) (*Result, error) {
		if *puts < 1 || *rate <= 0 || *streams < 1 || *perStream < 1 {
			return nil, errors.New("--puts, --put-rate, --streams and --watchers-per-stream must be positive")
		}
		const key = "/corebench/watch"
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)

		n := *streams * *perStream
		expected := int64(*puts) * int64(n)
		// One origin, fixed before any goroutine reads it, for both ends
		// of every latency.
		origin := time.Now()
		sendAt := make([]atomic.Int64, *puts) // ns since origin
		var rec recorder

		wctx, cancelWatch := context.WithCancel(ctx)
		defer cancelWatch()
		var wg sync.WaitGroup
		for s := range *streams {
			// Watches on one Watcher with one context share one gRPC
			// stream; a Watcher per stream gives etcd's stream layout.
			w := clientv3.NewWatcher(clis[s%len(clis)])
			defer w.Close()
			for range *perStream {
				wch := w.Watch(wctx, key, clientv3.WithCreatedNotify())
				select {
				case resp, ok := <-wch:
					if !ok || !resp.Created {
						return nil, fmt.Errorf("create watcher: %v", resp.Err())
					}
				case <-ctx.Done():
					return nil, fmt.Errorf("create watchers: %w", ctx.Err())
				}
				wg.Go(func() {
					var lats []time.Duration
					defer func() { rec.merge(lats) }()
					got := 0
					for resp := range wch {
						now := time.Since(origin)
						if err := resp.Err(); err != nil {
							rec.fail(fmt.Errorf("watch: %w", err))
							return
						}
						for _, ev := range resp.Events {
							i, err := strconv.Atoi(strings.TrimRight(string(ev.Kv.Value), "-"))
							if err != nil || i < 0 || i >= *puts {
								rec.fail(fmt.Errorf("watch: unexpected value %q", ev.Kv.Value))
								continue
							}
							lats = append(lats, now-time.Duration(sendAt[i].Load()))
							rec.done.Add(1)
							if got++; got == *puts {
								return
							}
						}
					}
				})
			}
		}

		writer := clis[0]
		var putErrs recorder
		prog := startProgress("watch deliveries", expected, &rec.done, &putErrs.failed)
		start := time.Now()
		interval := time.Duration(float64(time.Second) / *rate)
		for i := range *puts {
			if err := sleepCtx(ctx, time.Until(start.Add(interval*time.Duration(i)))); err != nil {
				break
			}
			val := strconv.Itoa(i)
			if pad := *valSize - len(val); pad > 0 {
				val += strings.Repeat("-", pad)
			}
			sendAt[i].Store(int64(time.Since(origin)))
			if _, err := writer.Put(ctx, key, val); err != nil {
				putErrs.fail(fmt.Errorf("put: %w", err))
			}
		}
		lastPut := time.Since(start)

		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(*drain):
		case <-ctx.Done():
		}
		cancelWatch()
		<-done
		prog.stop()

		s := rec.stats(time.Since(start))
		ps := putErrs.stats(lastPut)
		r := &Result{Workload: "watch"}
		r.add("delivery_p50_ms", ms(s.Percentile(50)), "ms", "lower", true)
		r.add("delivery_p99_ms", ms(s.Percentile(99)), "ms", "lower", true)
		r.add("delivery_max_ms", ms(s.Max()), "ms", "lower", false)
		r.add("delivery_avg_ms", ms(s.Mean()), "ms", "lower", false)
		r.add("deliveries_per_sec", s.RPS(), "events/s", "higher", false)
		r.add("watchers", float64(n), "", "", false)
		missing := expected - int64(s.Count())
		r.add("missing", float64(missing), "events", "lower", false)
		r.addErrors(s)
		r.addErrors(ps)
		var b strings.Builder
		fmt.Fprintf(&b, "%d puts at %.0f/s to one key, %d watchers (%d streams x %d); latency is put sent -> event received\n",
			*puts, *rate, n, *streams, *perStream)
		s.writeSummary(&b, "Deliveries")
		if missing > 0 {
			fmt.Fprintf(&b, "\n%d of %d deliveries missing after --drain-timeout %v\n", missing, expected, *drain)
		}
		r.Text = b.String()
		switch {
		case ctx.Err() != nil:
			return r, fmt.Errorf("stopped after %d of %d deliveries: %w", s.Count(), expected, ctx.Err())
		case ps.NErr > 0:
			return r, fmt.Errorf("%d of %d puts failed, e.g. %s", ps.NErr, *puts, firstError(ps))
		case missing > 0:
			return r, fmt.Errorf("%d of %d deliveries missing", missing, expected)
		}
		return r, nil
	}
}

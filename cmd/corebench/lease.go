package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const expiryPrefix = "/corebench/expiry/"

// setupExpiry grants many leases with the same TTL as fast as the cluster
// takes them, so they fall due as close together as a client can arrange,
// attaches one key to each, and times every key's DELETE as a watcher on the
// leader sees it.
//
// A lease's deadline lies between its grant's send and its acknowledgement,
// plus the TTL, and the client cannot see where. Lag is measured from the
// acknowledgement (so it is if anything overstated and may be slightly
// negative); "early" counts deletions before send+TTL, which no correct
// server can produce, so it must be 0.
func setupExpiry(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	leases := fs.Int("leases", 1000, "number of leases, each with one key")
	ttl := fs.Int64("ttl", 5, "TTL in seconds; must outlast granting all leases and attaching their keys")
	drain := fs.Duration("drain-timeout", 60*time.Second, "how long after the last deadline to wait for every DELETE")
	return func(ctx context.Context, c *common) (*Result, error) {
		n := *leases
		if n < 1 || *ttl < 1 {
			return nil, errors.New("--leases and --ttl must be positive")
		}
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		// The leader is where expiry is decided in both systems; watching
		// there keeps follower apply lag out of the numbers.
		watchEP := c.endpoints[0]
		if ls, err := findLeader(ctx, c, c.endpoints); err == nil {
			watchEP = ls.endpoint
		}
		wcli, err := newClient(c, watchEP)
		if err != nil {
			return nil, err
		}
		defer wcli.Close()

		origin := time.Now()
		goneAt := make([]atomic.Int64, n) // ns since origin; 0 while the key exists
		var seen atomic.Int64
		var watchErr atomic.Pointer[error]
		wctx, cancelWatch := context.WithCancel(ctx)
		defer cancelWatch()
		wch := wcli.Watch(wctx, expiryPrefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		if resp, ok := <-wch; !ok || !resp.Created {
			return nil, fmt.Errorf("watch %s on %s: %v", expiryPrefix, watchEP, resp.Err())
		}
		watchDone := make(chan struct{})
		go func() {
			defer close(watchDone)
			for resp := range wch {
				now := int64(time.Since(origin))
				if err := resp.Err(); err != nil {
					err = fmt.Errorf("expiry watch: %w", err)
					watchErr.Store(&err)
					return
				}
				for _, ev := range resp.Events {
					i, err := strconv.Atoi(strings.TrimPrefix(string(ev.Kv.Key), expiryPrefix))
					if err == nil && i >= 0 && i < n && goneAt[i].CompareAndSwap(0, now) {
						seen.Add(1)
					}
				}
			}
		}()

		dueAt := make([]time.Duration, n) // acknowledgement + granted TTL
		earliest := make([]time.Duration, n)
		ids := make([]clientv3.LeaseID, n)
		gs := runOps(ctx, "expiry grant", clis, c.clients, int64(n), func(ctx context.Context, cli *clientv3.Client, i int64) error {
			send := time.Since(origin)
			g, err := cli.Grant(ctx, *ttl)
			if err != nil {
				return err
			}
			// Servers raise TTLs below their minimum; the granted one counts.
			ttl := time.Duration(g.TTL) * time.Second
			dueAt[i], earliest[i], ids[i] = time.Since(origin)+ttl, send+ttl, g.ID
			return nil
		})
		attached := make([]bool, n)
		as := runOps(ctx, "expiry attach", clis, c.clients, int64(n), func(ctx context.Context, cli *clientv3.Client, i int64) error {
			if ids[i] == 0 {
				return errors.New("lease not granted")
			}
			_, err := cli.Put(ctx, fmt.Sprintf("%s%08d", expiryPrefix, i), "x", clientv3.WithLease(ids[i]))
			if err != nil {
				return err
			}
			attached[i] = true
			return nil
		})
		attachedBy := time.Since(origin)

		var want int64
		var firstDue, lastDue time.Duration = -1, 0
		for i := range n {
			if !attached[i] {
				continue
			}
			want++
			if firstDue < 0 || dueAt[i] < firstDue {
				firstDue = dueAt[i]
			}
			lastDue = max(lastDue, dueAt[i])
		}
		if want == 0 {
			return nil, fmt.Errorf("no lease got its key: grants %d failed (%s), attaches %d failed (%s)",
				gs.NErr, firstError(gs), as.NErr, firstError(as))
		}

		prog := startProgress("expiry deletes", want, &seen, nil)
		timeout := time.NewTimer(time.Until(origin.Add(lastDue + *drain)))
		defer timeout.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
	wait:
		for seen.Load() < want {
			select {
			case <-tick.C:
			case <-watchDone:
				break wait
			case <-timeout.C:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		prog.stop()
		cancelWatch()
		<-watchDone

		var lags []time.Duration
		var early, lastGone time.Duration
		var nEarly int
		for i := range n {
			g := time.Duration(goneAt[i].Load())
			if !attached[i] || g == 0 {
				continue
			}
			lags = append(lags, g-dueAt[i])
			if g < earliest[i] {
				nEarly++
				early = min(early, g-earliest[i])
			}
			lastGone = max(lastGone, g)
		}
		missing := want - int64(len(lags))
		s := newStats(lags, lastGone-firstDue)

		r := &Result{Workload: "expiry"}
		r.add("lag_p50_ms", ms(s.Percentile(50)), "ms", "lower", true)
		r.add("lag_p99_ms", ms(s.Percentile(99)), "ms", "lower", true)
		r.add("lag_max_ms", ms(s.Max()), "ms", "lower", true)
		r.add("all_gone_ms", ms(lastGone-firstDue), "ms", "lower", true)
		r.add("early", float64(nEarly), "leases", "lower", true)
		r.add("missing", float64(missing), "leases", "lower", false)
		r.add("due_spread_ms", ms(lastDue-firstDue), "ms", "", false)
		r.add("grant_rps", gs.RPS(), "req/s", "higher", false)
		r.addErrors(gs)
		r.addErrors(as)

		var b strings.Builder
		fmt.Fprintf(&b, "%d leases of TTL %ds granted in %.2fs (%.0f/s, %d failed), keys attached in %.2fs (%d failed); watcher on %s\n",
			n, *ttl, gs.Wall.Seconds(), gs.RPS(), gs.NErr, as.Wall.Seconds(), as.NErr, watchEP)
		fmt.Fprintf(&b, "deadlines (grant ack + TTL) spread over %.3fs; every key gone %.3fs after the first deadline\n",
			(lastDue - firstDue).Seconds(), (lastGone - firstDue).Seconds())
		fmt.Fprintf(&b, "lag = DELETE seen - (grant ack + TTL): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
			ms(s.Percentile(50)), ms(s.Percentile(99)), ms(s.Max()))
		fmt.Fprintf(&b, "deleted before grant send + TTL (early, must be 0): %d", nEarly)
		if nEarly > 0 {
			fmt.Fprintf(&b, " (worst %.1f ms early)", -ms(early))
		}
		fmt.Fprintln(&b)
		s.writeSummary(&b, "Expirations")
		r.Text = b.String()

		var errs []error
		firstEarliest := attachedBy
		for i := range n {
			if ids[i] != 0 {
				firstEarliest = min(firstEarliest, earliest[i])
			}
		}
		if attachedBy > firstEarliest && as.NErr > 0 {
			errs = append(errs, fmt.Errorf("attaching keys took until %.1fs, past the first deadline: raise --ttl", attachedBy.Seconds()))
		}
		if p := watchErr.Load(); p != nil {
			errs = append(errs, *p)
		}
		if missing > 0 {
			errs = append(errs, fmt.Errorf("%d of %d keys not deleted within --drain-timeout %v of the last deadline", missing, want, *drain))
		}
		if nEarly > 0 {
			errs = append(errs, fmt.Errorf("%d keys deleted before their lease could have expired", nEarly))
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
		}
		return r, errors.Join(errs...)
	}
}

// setupIdleMemory grants leases that nobody keeps alive, one key each, and
// reports how much every member's resident set grew per lease. RSS is what
// an operator pays; it includes garbage not yet collected, for both systems
// alike, so use enough leases that the growth dwarfs that noise.
func setupIdleMemory(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	leases := fs.Int("leases", 10000, "number of leases, each with one key")
	ttl := fs.Int64("ttl", 3600, "TTL in seconds; long enough that none expires before the second reading")
	settle := fs.Duration("settle", 3*time.Second, "wait before each RSS reading, so background work (checkpoints, GC) settles")
	return func(ctx context.Context, c *common) (*Result, error) {
		n := *leases
		if n < 1 {
			return nil, errors.New("--leases must be positive")
		}
		pids, leader, err := c.membersAndLeader(ctx)
		if err != nil {
			return nil, err
		}
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		// The heap is a second opinion only: a member without /metrics
		// still gets its RSS measured.
		var heapErr error
		leaderHeap := func() float64 {
			v, err := heapAlloc(ctx, leader.endpoint)
			if err != nil {
				heapErr = err
			}
			return v
		}
		if err := sleepCtx(ctx, *settle); err != nil {
			return nil, err
		}
		before, err := rssAll(pids)
		if err != nil {
			return nil, err
		}
		heapBefore := leaderHeap()
		val := strings.Repeat("v", 13)
		s := runOps(ctx, "idle-lease-memory", clis, c.clients, int64(n), func(ctx context.Context, cli *clientv3.Client, i int64) error {
			g, err := cli.Grant(ctx, *ttl)
			if err != nil {
				return fmt.Errorf("grant: %w", err)
			}
			_, err = cli.Put(ctx, fmt.Sprintf("/corebench/idle/%010d", i), val, clientv3.WithLease(g.ID))
			return err
		})
		if err := sleepCtx(ctx, *settle); err != nil {
			return nil, err
		}
		after, err := rssAll(pids)
		if err != nil {
			return nil, err
		}
		heapAfter := leaderHeap()
		ok := float64(s.Count())
		if ok == 0 {
			return nil, fmt.Errorf("every grant failed, e.g. %s", firstError(s))
		}

		r := &Result{Workload: "idle-lease-memory"}
		var b strings.Builder
		fmt.Fprintf(&b, "%d leases with one 26-byte key and a 13-byte value each, granted in %.2fs (%d failed); RSS after %v settling:\n",
			s.Count(), s.Wall.Seconds(), s.NErr, *settle)
		addGrowth(r, &b, pids, before, after, leader.endpoint, ok, "lease")
		r.add("grant_put_rps", s.RPS(), "req/s", "higher", false)
		if heapErr == nil {
			r.add("leader_heap_bytes_per_lease", (heapAfter-heapBefore)/ok, "bytes", "lower", true)
			fmt.Fprintf(&b, "leader's Go heap (go_memstats_heap_alloc_bytes, includes unswept garbage): %.1f MiB -> %.1f MiB: %+.0f bytes/lease\n",
				heapBefore/(1<<20), heapAfter/(1<<20), (heapAfter-heapBefore)/ok)
		} else {
			fmt.Fprintf(&b, "leader's Go heap not measured: %v\n", heapErr)
		}
		r.Text = b.String()
		r.addErrors(s)
		return r, ctx.Err()
	}
}

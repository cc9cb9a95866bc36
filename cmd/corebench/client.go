package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// connect opens one client per connection, connection i on endpoint
// i mod len(endpoints) as etcd's benchmark does, and makes one round trip
// on each so dialing is not timed as the first requests' latency.
func connect(ctx context.Context, c *common, endpoints []string, n int) ([]*clientv3.Client, error) {
	clis := make([]*clientv3.Client, 0, n)
	for i := range n {
		cli, err := newClient(c, endpoints[i%len(endpoints)])
		if err != nil {
			closeAll(clis)
			return nil, err
		}
		clis = append(clis, cli)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, cli := range clis {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
			defer cancel()
			if _, err := cli.Get(wctx, "/corebench/warmup", clientv3.WithSerializable()); err != nil {
				errs[i] = fmt.Errorf("warm-up read on %s: %w", cli.Endpoints()[0], err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(clis)
		return nil, err
	}
	return clis, nil
}

func newClient(c *common, endpoint string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: c.dialTimeout,
		// The client logs every retry; the summary counts errors instead.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	return cli, nil
}

func closeAll(clis []*clientv3.Client) {
	for _, cli := range clis {
		cli.Close()
	}
}

// opFunc performs operation i; it is timed from call to return.
type opFunc func(ctx context.Context, cli *clientv3.Client, i int64) error

// runOps performs operations 0..total-1 from `clients` workers, worker w on
// connection w mod len(clis), each taking the next index when it is free:
// closed-loop load, like etcd's benchmark. It stops early when ctx ends.
func runOps(ctx context.Context, label string, clis []*clientv3.Client, clients int, total int64, op opFunc) stats {
	var next atomic.Int64
	var rec recorder
	prog := startProgress(label, total, &rec.done, &rec.failed)
	defer prog.stop()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			cli := clis[w%len(clis)]
			var lats []time.Duration
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= total {
					break
				}
				t := time.Now()
				err := op(ctx, cli, i)
				if err != nil {
					rec.fail(err)
				} else {
					lats = append(lats, time.Since(t))
				}
				rec.done.Add(1)
			}
			rec.merge(lats)
		})
	}
	wg.Wait()
	return rec.stats(time.Since(start))
}

// memberStatus is one endpoint's answer to Maintenance.Status.
type memberStatus struct {
	endpoint string
	id       uint64
	leader   uint64
	err      error
}

// statusAll asks every endpoint for its status, each on its own short-lived
// client so a dead member costs one timeout, not the whole call.
func statusAll(ctx context.Context, c *common, endpoints []string, timeout time.Duration) []memberStatus {
	out := make([]memberStatus, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Go(func() {
			out[i].endpoint = ep
			cli, err := newClient(c, ep)
			if err != nil {
				out[i].err = err
				return
			}
			defer cli.Close()
			sctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			st, err := cli.Status(sctx, ep)
			if err != nil {
				out[i].err = fmt.Errorf("status of %s: %w", ep, err)
				return
			}
			out[i].id, out[i].leader = st.Header.MemberId, st.Leader
			if len(st.Errors) > 0 {
				out[i].err = fmt.Errorf("status of %s: %s", ep, strings.Join(st.Errors, "; "))
			}
		})
	}
	wg.Wait()
	return out
}

// findLeader returns the status of the endpoint whose member says it is
// the leader.
func findLeader(ctx context.Context, c *common, endpoints []string) (memberStatus, error) {
	var errs []error
	for _, st := range statusAll(ctx, c, endpoints, c.dialTimeout) {
		if st.err != nil {
			errs = append(errs, st.err)
			continue
		}
		if st.leader != 0 && st.id == st.leader {
			return st, nil
		}
	}
	return memberStatus{}, fmt.Errorf("no endpoint is the leader: %w", errors.Join(errs...))
}

// endpointsTo is the endpoints a workload's connections dial for --to:
// all of them (any), the leader's, or the first follower's. A write's
// path differs by role (a follower forwards it), so a comparison of two
// systems names the role rather than take whichever member the election
// made of the first endpoint.
func endpointsTo(ctx context.Context, c *common, to string) ([]string, error) {
	switch to {
	case "any":
		return c.endpoints, nil
	case "leader", "follower":
	default:
		return nil, fmt.Errorf("--to %q: want any, leader or follower", to)
	}
	lead, err := findLeader(ctx, c, c.endpoints)
	if err != nil {
		return nil, err
	}
	if to == "leader" {
		return []string{lead.endpoint}, nil
	}
	for _, ep := range c.endpoints {
		if ep != lead.endpoint {
			return []string{ep}, nil
		}
	}
	return nil, fmt.Errorf("--to follower: every endpoint is the leader %s", lead.endpoint)
}

// rss reads a process's resident set size from /proc/<pid>/status.
func rss(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read RSS of pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("pid %d: unexpected VmRSS line %q", pid, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d: VmRSS %q: %w", pid, fields[0], err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read RSS of pid %d: %w", pid, err)
	}
	return 0, fmt.Errorf("pid %d has no VmRSS (a zombie or a kernel thread?)", pid)
}

// rssAll reads the resident set size of every process in pids, keyed as
// pids is.
func rssAll(pids map[string]int) (map[string]int64, error) {
	out := make(map[string]int64, len(pids))
	for ep, pid := range pids {
		v, err := rss(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ep, err)
		}
		out[ep] = v
	}
	return out, nil
}

// addGrowth reports how much each member's RSS grew per unit (a lease, a
// key) between before and after, as leader_bytes_per_UNIT and
// member_avg_bytes_per_UNIT, with one line per member in b.
func addGrowth(r *Result, b *strings.Builder, pids map[string]int, before, after map[string]int64, leader string, units float64, unit string) {
	var sum float64
	for _, ep := range slices.Sorted(maps.Keys(pids)) {
		grew := float64(after[ep] - before[ep])
		sum += grew
		role := "follower"
		if endpointKey(ep) == endpointKey(leader) {
			role = "leader"
			r.add("leader_bytes_per_"+unit, grew/units, "bytes", "lower", true)
		}
		fmt.Fprintf(b, "  %-22s %-8s pid %-7d %7.1f MiB -> %7.1f MiB: %+.0f bytes/%s\n",
			ep, role, pids[ep], float64(before[ep])/(1<<20), float64(after[ep])/(1<<20), grew/units, unit)
	}
	avg := sum / units / float64(len(pids))
	r.add("member_avg_bytes_per_"+unit, avg, "bytes", "lower", true)
	fmt.Fprintf(b, "average per member: %.0f bytes/%s\n", avg, unit)
}

// heapAlloc reads go_memstats_heap_alloc_bytes from the member's /metrics
// on its client URL (etcd and corenode both serve it there): the Go heap,
// live objects plus garbage not yet swept, without RSS's allocator slack.
func heapAlloc(ctx context.Context, endpoint string) (float64, error) {
	url := endpoint
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	url = strings.TrimSuffix(url, "/") + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("metrics of %s: %w", endpoint, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("metrics of %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics of %s: %s", endpoint, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_alloc_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("metrics of %s: %q: %w", endpoint, v, err)
			}
			return f, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("metrics of %s: %w", endpoint, err)
	}
	return 0, fmt.Errorf("metrics of %s: no go_memstats_heap_alloc_bytes", endpoint)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package member_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/client/cache"
	"github.com/corenode/corenode/member/membertest"
)

// Cluster benchmarks: 3 members in this process on loopback, 100 concurrent
// requests over 10 client connections (etcd's benchmark defaults). Run with
//
//	go test -run '^$' -bench . -benchtime 20000x ./member/
//
// They report requests/s; ns/op is wall time divided by requests.

const (
	benchConns   = 10
	benchClients = 100
)

func benchClientsOf(b *testing.B, c *membertest.Cluster) []*clientv3.Client {
	var out []*clientv3.Client
	for i := range benchConns {
		out = append(out, c.Client(i%3))
	}
	return out
}

// runConcurrent runs op for i in [0, n) from benchClients goroutines over
// clis and returns the first error.
func runConcurrent(clis []*clientv3.Client, n int, op func(ctx context.Context, cli *clientv3.Client, i int64) error) error {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range benchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := clis[w%len(clis)]
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if err := op(ctx, cli, i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	err, _ := failed.Load().(error)
	return err
}

// drive runs op b.N times from benchClients goroutines and reports req/s.
func drive(b *testing.B, clis []*clientv3.Client, op func(ctx context.Context, cli *clientv3.Client, i int64) error) {
	b.ResetTimer()
	start := time.Now()
	err := runConcurrent(clis, b.N, op)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}

func BenchmarkPut(b *testing.B) {
	c := membertest.New(b, 3)
	val := string(make([]byte, 256))
	drive(b, benchClientsOf(b, c), func(ctx context.Context, cli *clientv3.Client, i int64) error {
		_, err := cli.Put(ctx, fmt.Sprintf("key-%d", i%10000), val)
		return err
	})
}

func BenchmarkRangeLinearizable(b *testing.B) {
	c := membertest.New(b, 3)
	c.Client().Put(context.Background(), "foo", "bar")
	drive(b, benchClientsOf(b, c), func(ctx context.Context, cli *clientv3.Client, i int64) error {
		_, err := cli.Get(ctx, "foo")
		return err
	})
}

func BenchmarkRangeSerializable(b *testing.B) {
	c := membertest.New(b, 3)
	c.Client().Put(context.Background(), "foo", "bar")
	drive(b, benchClientsOf(b, c), func(ctx context.Context, cli *clientv3.Client, i int64) error {
		_, err := cli.Get(ctx, "foo", clientv3.WithSerializable())
		return err
	})
}

func BenchmarkLeaseGrant(b *testing.B) {
	c := membertest.New(b, 3)
	drive(b, benchClientsOf(b, c), func(ctx context.Context, cli *clientv3.Client, i int64) error {
		_, err := cli.Grant(ctx, 60)
		return err
	})
}

func BenchmarkLeaseKeepAlive(b *testing.B) {
	c := membertest.New(b, 3)
	clis := benchClientsOf(b, c)
	ids := make([]clientv3.LeaseID, benchClients)
	for i := range ids {
		g, err := clis[0].Grant(context.Background(), 60)
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = g.ID
	}
	drive(b, clis, func(ctx context.Context, cli *clientv3.Client, i int64) error {
		_, err := cli.KeepAliveOnce(ctx, ids[i%benchClients])
		return err
	})
}

// benchExpiry grants n leases of TTL 8 s, each with one key, as fast as
// the cluster takes them (10,000 take 2-4 s here, so all are due within a
// few seconds of each other and after the granting load has stopped), and
// measures expiry lag: the time from each lease's deadline (its grant's
// acknowledgement plus the TTL, so the lag is if anything overstated) to
// the DELETE a watcher sees.
func benchExpiry(b *testing.B, n int) {
	c := membertest.New(b, 3)
	clis := benchClientsOf(b, c)
	ctx := context.Background()
	const ttl = 8 * time.Second
	deadlines := make([]time.Time, n)
	gone := make([]time.Time, n)
	keys := map[string]int{}
	for i := range n {
		keys[fmt.Sprintf("/exp/%06d", i)] = i
	}
	wch := c.Client(c.WaitLeader()).Watch(ctx, "/exp/", clientv3.WithPrefix(), clientv3.WithFilterPut())
	b.ResetTimer()
	err := runConcurrent(clis, n, func(ctx context.Context, cli *clientv3.Client, i int64) error {
		g, err := cli.Grant(ctx, int64(ttl/time.Second))
		if err != nil {
			return err
		}
		deadlines[i] = time.Now().Add(ttl)
		_, err = cli.Put(ctx, fmt.Sprintf("/exp/%06d", i), "x", clientv3.WithLease(g.ID))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	seen := 0
	timeout := time.After(30 * time.Second)
	for seen < n {
		select {
		case resp := <-wch:
			now := time.Now()
			for _, ev := range resp.Events {
				gone[keys[string(ev.Kv.Key)]] = now
				seen++
			}
		case <-timeout:
			b.Fatalf("only %d of %d leases expired", seen, n)
		}
	}
	b.StopTimer()
	lags := make([]time.Duration, n)
	early := 0
	for i := range n {
		lags[i] = gone[i].Sub(deadlines[i])
		if lags[i] < -100*time.Millisecond { // beyond the grant round trip: truly early
			early++
		}
	}
	slices.Sort(lags)
	b.ReportMetric(float64(lags[n/2].Milliseconds()), "lag-p50-ms")
	b.ReportMetric(float64(lags[n*99/100].Milliseconds()), "lag-p99-ms")
	b.ReportMetric(float64(lags[n-1].Milliseconds()), "lag-max-ms")
	b.ReportMetric(float64(early), "early")
}

func BenchmarkExpiry2k(b *testing.B)  { benchExpiry(b, 2000) }
func BenchmarkExpiry10k(b *testing.B) { benchExpiry(b, 10000) }

// BenchmarkPutCachedKey is one writer's put latency on a key that caches
// hold (client/cache, each reading every millisecond, spread over the
// members so two thirds reach the leader through a follower's relay),
// against the same put on a key nobody caches: what read leases cost a
// writer when every holder answers. Puts are 20 ms apart; it reports p50
// and p90.
//
//	go test -run '^$' -bench PutCachedKey -benchtime 200x ./member/
func BenchmarkPutCachedKey(b *testing.B) {
	for _, holders := range []int{0, 1, 10} {
		b.Run(fmt.Sprintf("holders=%d", holders), func(b *testing.B) {
			c := membertest.New(b, 3)
			cli := c.Client(c.WaitLeader())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := cli.Put(ctx, "k", "0"); err != nil {
				b.Fatal(err)
			}
			var readers sync.WaitGroup
			defer readers.Wait()
			defer cancel()
			for h := range holders {
				cc, err := cache.New(c.Client(h % 3))
				if err != nil {
					b.Fatal(err)
				}
				readers.Go(func() {
					defer cc.Close()
					for ctx.Err() == nil {
						cc.Get(ctx, "k")
						time.Sleep(time.Millisecond)
					}
				})
			}
			time.Sleep(300 * time.Millisecond)
			var lats []time.Duration
			i := 0
			for b.Loop() {
				b.StopTimer()
				time.Sleep(20 * time.Millisecond)
				b.StartTimer()
				s := time.Now()
				if _, err := cli.Put(ctx, "k", fmt.Sprint(i)); err != nil {
					b.Fatal(err)
				}
				lats = append(lats, time.Since(s))
				i++
			}
			slices.Sort(lats)
			b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lats[len(lats)*9/10].Microseconds())/1000, "p90-ms")
		})
	}
}

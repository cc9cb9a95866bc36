package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lookupRecord is an endpoint record as etcd's naming/endpoints.Manager
// stores it, which client/discovery and `corenode register` write.
type lookupRecord struct {
	Op       int
	Addr     string
	Metadata any
}

// setupLookup is the `lookup` workload: find the endpoints of one service,
// either as any program would through a member's DNS server (--via dns:
// an SRV query, answered from the member's state) or as an etcd client
// does (--via range-s or range-l: a prefix Range of the service's records,
// decoded). The same --endpoints-count records are stored first.
func setupLookup(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	via := fs.String("via", "dns", "dns (SRV queries to --dns-addr), range-s or range-l (a serializable or linearizable prefix Range through --endpoints)")
	dnsAddr := fs.String("dns-addr", "", "HOST:PORT of the member's DNS server, for --via dns")
	service := fs.String("service", "corebench-web", "service to look up")
	count := fs.Int("endpoints-count", 3, "endpoints stored for the service before the run")
	total := fs.Int64("total", 100000, "total number of lookups")
	return func(ctx context.Context, c *common) (*Result, error) {
		if *count < 1 || *count > 250 {
			return nil, errors.New("--endpoints-count must be within 1..250")
		}
		clis, err := connect(ctx, c, c.endpoints, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)
		prefix := *service + "/"
		if _, err := clis[0].Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
			return nil, fmt.Errorf("clear %s: %w", prefix, err)
		}
		for i := range *count {
			addr := fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250+1)
			rec, _ := json.Marshal(lookupRecord{Addr: addr})
			if _, err := clis[0].Put(ctx, prefix+addr, string(rec)); err != nil {
				return nil, fmt.Errorf("store %s: %w", addr, err)
			}
		}
		name := "lookup-" + *via
		var op opFunc
		switch *via {
		case "dns":
			if *dnsAddr == "" {
				return nil, errors.New("--via dns needs --dns-addr")
			}
			q := new(dns.Msg)
			q.SetQuestion(*service+".service.corenode.", dns.TypeSRV)
			q.SetEdns0(4096, false)
			pool := &dnsConns{addr: *dnsAddr}
			defer pool.close()
			// The records reach a follower's state a moment after the put.
			for {
				r, err := pool.exchange(q)
				if err == nil && len(r.Answer) == *count {
					break
				}
				if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
					return nil, fmt.Errorf("the DNS server at %s never answered %d records: %v", *dnsAddr, *count, err)
				}
			}
			op = func(ctx context.Context, _ *clientv3.Client, i int64) error {
				r, err := pool.exchange(q)
				if err != nil {
					return err
				}
				if r.Rcode != dns.RcodeSuccess || len(r.Answer) != *count {
					return fmt.Errorf("answer %s with %d records", dns.RcodeToString[r.Rcode], len(r.Answer))
				}
				return nil
			}
		case "range-s", "range-l":
			opts := []clientv3.OpOption{clientv3.WithPrefix()}
			if *via == "range-s" {
				opts = append(opts, clientv3.WithSerializable())
			}
			for _, cli := range clis {
				for {
					resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithCountOnly())
					if err != nil {
						return nil, err
					}
					if resp.Count == int64(*count) {
						break
					}
					if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
						return nil, err
					}
				}
			}
			op = func(ctx context.Context, cli *clientv3.Client, i int64) error {
				resp, err := cli.Get(ctx, prefix, opts...)
				if err != nil {
					return err
				}
				// A client needs the addresses, as DNS hands them.
				for _, kv := range resp.Kvs {
					var rec lookupRecord
					if err := json.Unmarshal(kv.Value, &rec); err != nil {
						return err
					}
				}
				if len(resp.Kvs) != *count {
					return fmt.Errorf("%d records", len(resp.Kvs))
				}
				return nil
			}
		default:
			return nil, fmt.Errorf("--via %q: want dns, range-s or range-l", *via)
		}
		s := runOps(ctx, name, clis, c.clients, *total, op)
		return opsResult(ctx, name, *total, s)
	}
}

// dnsConns lends each worker a UDP connection of its own: the server's
// throughput is measured, not the client's socket set-up.
type dnsConns struct {
	addr string
	mu   sync.Mutex
	free []*dns.Conn
	all  []*dns.Conn
}

func (p *dnsConns) exchange(q *dns.Msg) (*dns.Msg, error) {
	p.mu.Lock()
	var conn *dns.Conn
	if n := len(p.free); n > 0 {
		conn, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if conn == nil {
		var err error
		if conn, err = dns.DialTimeout("udp", p.addr, 2*time.Second); err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.all = append(p.all, conn)
		p.mu.Unlock()
	}
	m := q.Copy()
	m.Id = dns.Id()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	err := conn.WriteMsg(m)
	var r *dns.Msg
	if err == nil {
		r, err = conn.ReadMsg()
	}
	if err == nil && r.Id != m.Id {
		err = errors.New("answer to another query")
	}
	if err != nil {
		return nil, err // the connection is dropped: a late answer must not meet the next query
	}
	p.mu.Lock()
	p.free = append(p.free, conn)
	p.mu.Unlock()
	return r, nil
}

func (p *dnsConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.all {
		c.Close()
	}
}

// setupCheckRemoval is the `check-removal` workload: how long after a
// failed health check the endpoint's SRV record is gone from a member's
// DNS answer. corebench serves the health endpoint itself and runs
// `corenode register --check-http` against it; each round makes the
// endpoint healthy, waits for its SRV record, makes it fail, and times
// from the first failing answer the check got to the first DNS answer
// without the record (asked every --poll).
func setupCheckRemoval(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	bin := fs.String("corenode", "corenode", "the corenode binary that runs `register`")
	dnsAddr := fs.String("dns-addr", "", "HOST:PORT of the member's DNS server")
	rounds := fs.Int("rounds", 20, "failures timed")
	interval := fs.Duration("check-interval", time.Second, "the register's --check-interval")
	poll := fs.Duration("poll", time.Millisecond, "time between DNS queries while waiting for a change")
	return func(ctx context.Context, c *common) (*Result, error) {
		if *dnsAddr == "" {
			return nil, errors.New("--dns-addr is required")
		}
		var healthy atomic.Bool
		var failedAt atomic.Int64 // unix ns of the first failing answer since the flip
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if healthy.Load() {
				return
			}
			failedAt.CompareAndSwap(0, time.Now().UnixNano())
			w.WriteHeader(http.StatusServiceUnavailable)
		}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		addr := ln.Addr().String()
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		reg := exec.CommandContext(rctx, *bin, "register", "--endpoints", strings.Join(c.endpoints, ","), "--ttl", "10",
			"--check-http", "http://"+addr+"/health", "--check-interval", interval.String(), "corebench-rm", addr)
		reg.Stderr = nil // its log lines would drown the progress
		reg.Env = append(os.Environ(), "ETCDCTL_ENDPOINTS=")
		if err := reg.Start(); err != nil {
			return nil, err
		}
		defer func() { cancel(); _ = reg.Wait() }()
		pool := &dnsConns{addr: *dnsAddr}
		defer pool.close()
		q := new(dns.Msg)
		q.SetQuestion("corebench-rm.service.corenode.", dns.TypeSRV)
		present := func() (bool, error) {
			r, err := pool.exchange(q)
			if err != nil {
				return false, err
			}
			return len(r.Answer) > 0, nil
		}
		waitFor := func(want bool, within time.Duration) (time.Time, error) {
			deadline := time.Now().Add(within)
			for {
				ok, err := present()
				now := time.Now()
				if err == nil && ok == want {
					return now, nil
				}
				if now.After(deadline) {
					return now, fmt.Errorf("SRV record present=%v for %v (last error %v)", !want, within, err)
				}
				if err := sleepCtx(ctx, *poll); err != nil {
					return now, err
				}
			}
		}
		var rec, fromFlip recorder
		prog := startProgress("check-removal", int64(*rounds), &rec.done, &rec.failed)
		for range *rounds {
			healthy.Store(true)
			if _, err := waitFor(true, 3**interval+10*time.Second); err != nil {
				prog.stop()
				return nil, fmt.Errorf("endpoint never registered: %w", err)
			}
			failedAt.Store(0)
			flipped := time.Now()
			healthy.Store(false)
			gone, err := waitFor(false, 3**interval+5*time.Second)
			if err != nil {
				rec.fail(err)
				rec.done.Add(1)
				continue
			}
			first := time.Unix(0, failedAt.Load())
			rec.merge([]time.Duration{gone.Sub(first)})
			fromFlip.merge([]time.Duration{gone.Sub(flipped)})
			rec.done.Add(1)
		}
		prog.stop()
		s := rec.stats(0)
		r := &Result{Workload: "check-removal"}
		r.addLatency("", s)
		r.addLatency("from_health_failing_", fromFlip.stats(0))
		r.addErrors(s)
		var b strings.Builder
		s.writeSummary(&b, "Failed check to SRV record gone")
		fmt.Fprintf(&b, "\nFrom the health endpoint failing (includes waiting for the next check, interval %v): p50 %v, max %v\n",
			*interval, fromFlip.stats(0).Percentile(50), fromFlip.stats(0).Max())
		r.Text = b.String()
		if s.Count() == 0 {
			return r, errors.New("no round completed")
		}
		return r, nil
	}
}

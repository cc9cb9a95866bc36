package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/test/jepsen-lite/internal/cluster"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
	"github.com/corenode/corenode/test/jepsen-lite/internal/nemesis"
	"github.com/corenode/corenode/test/jepsen-lite/internal/workload"
)

// runner is one run: it owns the cluster, the clients and the history, and
// is what the hard deadline and a second signal tear down.
type runner struct {
	cfg     *config
	log     *slog.Logger
	started time.Time

	interrupted atomic.Bool

	mu       sync.Mutex
	cl       cluster.Cluster
	el       *workload.Election
	cr       *workload.Cached
	rec      *history.Recorder
	faults   int
	harness  []string // what went wrong with the run itself
	tempDirs []string // removed when the run ends
	skipped  []nemesis.Kind
}

func (r *runner) setCluster(c cluster.Cluster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cl = c
}

func (r *runner) harnessErr(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.log.Error(msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.harness = append(r.harness, msg)
}

// abort is the last resort: kill the cluster, save the history, print the
// verdict line and exit.
func (r *runner) abort(why string, status int) {
	abortOnce.Do(func() {
		r.log.Error("aborting", "why", why)
		r.mu.Lock()
		cl, el, cr, rec, faults := r.cl, r.el, r.cr, r.rec, r.faults
		r.mu.Unlock()
		if el != nil {
			el.KillNow()
		}
		if cr != nil {
			cr.KillNow()
		}
		if cl != nil {
			cl.KillNow()
		}
		r.mu.Lock()
		for _, d := range r.tempDirs {
			_ = os.RemoveAll(d)
		}
		r.mu.Unlock()
		ops := 0
		if rec != nil {
			_ = rec.Flush()
			ops = countOps(rec.Ops())
		}
		fmt.Printf("aborted: %s; history so far in %s\n", why, r.cfg.Out)
		fmt.Printf("valid=false ops=%d faults=%d anomalies=0\n", ops, faults)
		os.Exit(status)
	})
}

func (r *runner) saveConfig() error {
	b, err := json.MarshalIndent(r.cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("encode run config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(r.cfg.Out, "run.json"), b, 0o644); err != nil {
		return fmt.Errorf("save run config: %w", err)
	}
	return nil
}

// run is the whole run; it returns the exit status.
func (r *runner) run(ctx context.Context) int {
	cfg := r.cfg
	r.log.Info("jepsen-lite", "members", cfg.Members, "seed", cfg.Seed, "duration", cfg.Duration, "faults", cfg.Faults, "out", cfg.Out, "docker", cfg.Docker, "auth", cfg.Auth)
	if err := r.saveConfig(); err != nil {
		r.harnessErr("%v", err)
		return r.finish(nil, nil)
	}
	clock := history.NewClock()
	rec, err := history.NewRecorder(clock, filepath.Join(cfg.Out, "history.jsonl"))
	if err != nil {
		r.harnessErr("%v", err)
		return r.finish(nil, nil)
	}
	r.mu.Lock()
	r.rec = rec
	r.mu.Unlock()

	cl, err := r.startCluster(ctx)
	if err != nil {
		r.harnessErr("start the cluster: %v", err)
		return r.finish(rec, nil)
	}
	r.setCluster(cl)
	defer cl.Close()

	if cfg.Auth != "" {
		// Before the first client, so that every client, here and in the
		// processes started below, logs in.
		os.Setenv(cluster.AuthEnv, cluster.WorkloadUser+":"+cluster.WorkloadPassword)
	}
	n := cl.Size()
	endpoints := make([]string, n)
	pinned := make([]*clientv3.Client, n)
	for i := range n {
		endpoints[i] = cl.Endpoint(i)
		if pinned[i], err = cluster.NewClient([]string{endpoints[i]}); err != nil {
			r.harnessErr("%v", err)
			return r.finish(rec, cl)
		}
		defer pinned[i].Close()
	}
	all, err := cluster.NewClient(endpoints)
	if err != nil {
		r.harnessErr("%v", err)
		return r.finish(rec, cl)
	}
	defer all.Close()
	if err := cluster.WaitHealthy(ctx, pinned, endpoints, time.Minute, r.log); err != nil {
		r.harnessErr("%v", err)
		return r.finish(rec, cl)
	}
	r.log.Info("cluster healthy", "endpoints", endpoints, "after", time.Since(r.started).Round(time.Millisecond))
	// The nemesis moves the leader, which only root may.
	admin := pinned
	if cfg.Auth != "" {
		if admin, err = r.enableAuth(ctx, endpoints); err != nil {
			r.harnessErr("%v", err)
			return r.finish(rec, cl)
		}
		for _, c := range admin {
			defer c.Close()
		}
	}

	env := workload.NewEnv(rec, r.log, cfg.OpTimeout, pinned, all)
	// The holders start first: each mode needs a leader before the first
	// pause-holder fault, and they must live through every other fault.
	var holders nemesis.Holders
	clockFiles := map[string]string{}
	if modes, _ := holderModes(cfg.HolderModes); cfg.Holders > 0 && len(modes) > 0 {
		el, err := r.startElection(env, endpoints, modes)
		if err != nil {
			r.harnessErr("%v", err)
			return r.finish(rec, cl)
		}
		defer el.Stop(5 * time.Second)
		holders = el
		maps.Copy(clockFiles, el.ClockFiles())
	}
	// The cached-read readers too: pause-reader needs one running.
	var readers nemesis.Readers
	var cached *workload.Cached
	if cfg.CacheReaders > 0 {
		cr, err := r.startCached(env, endpoints)
		if err != nil {
			r.harnessErr("%v", err)
			return r.finish(rec, cl)
		}
		defer cr.Stop(5 * time.Second)
		readers, cached = cr, cr
		maps.Copy(clockFiles, cr.ClockFiles())
	}
	kinds, _ := nemesis.Parse(cfg.Faults)
	// About 9 s per fault and its quiet time fit a normal schedule; with
	// less, shorten them so that a short run still gets every kind.
	compact := cfg.Duration < time.Duration(len(kinds))*9*time.Second
	quietMin, quietMax := time.Second, 2*time.Second
	if compact {
		quietMin, quietMax = 700*time.Millisecond, 1100*time.Millisecond
	}
	nem := nemesis.New(cl, admin, endpoints, rec, r.log, nemesis.Config{
		Kinds: kinds, Seed: cfg.Seed,
		Election: time.Duration(cluster.DefaultSettings.ElectionMS) * time.Millisecond,
		MaxTTL:   time.Duration(cfg.MaxTTL) * time.Second,
		QuietMin: quietMin, QuietMax: quietMax, Compact: compact,
		Holders: holders, HolderTTL: cfg.HolderTTL,
		Readers: readers, ReadLease: cfg.readLease(),
		// About one change per TTL of the holders (2 s) and the leases
		// (3-5 s): a deadline is measured within one rate and across a
		// change.
		ClockFiles: clockFiles, ClockSpread: cfg.ClockSpread, ClockEveryMin: 2 * time.Second, ClockEveryMax: 5 * time.Second,
	})

	r.mu.Lock()
	r.skipped = nem.Skipped()
	r.mu.Unlock()

	// Contexts, stopped in this order: clients, leases (after they have
	// seen their last lease go), watchers (after the marker), monitor.
	monCtx, stopMon := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMon()
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	leaseCtx, stopLeases := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLeases()
	cliCtx, stopClients := context.WithCancel(ctx)
	defer stopClients()

	var mon, watchers, clients, leases workload.Group
	mon.Go(func() { workload.NewMonitor(env, endpoints, 200*time.Millisecond).Run(monCtx) })
	var ws []*workload.Watcher
	for i := range n {
		w := workload.NewWatcher(env, i)
		ws = append(ws, w)
		watchers.Go(func() { w.Run(watchCtx, cfg.Seed) })
	}
	reg := workload.NewRegister(env, cfg.Keys)
	for range cfg.Clients {
		clients.Go(func() { reg.Run(cliCtx, cfg.Seed) })
	}
	for range cfg.SetClients {
		clients.Go(func() { workload.RunSet(cliCtx, env, cfg.Seed) })
	}
	if cached != nil {
		for range cfg.CacheWriters {
			clients.Go(func() { cached.RunWriter(cliCtx) })
		}
	}
	finishLeases := make(chan struct{})
	lw := workload.NewLeases(env, workload.LeaseConfig{
		MinTTL: cfg.MinTTL, MaxTTL: cfg.MaxTTL, MaxKeepAlive: 8 * time.Second, RevokeProb: 0.2,
		ObserveFor: time.Duration(cfg.MaxTTL)*time.Second + 15*time.Second,
	})
	for range cfg.LeaseClients {
		leases.Go(func() { lw.Run(leaseCtx, finishLeases, cfg.Seed) })
	}

	// The faults, for -duration (or until a signal).
	nemCtx, stopNem := context.WithTimeout(ctx, cfg.Duration)
	nem.Run(nemCtx)
	stopNem()
	counts, total := nem.Counts()
	r.mu.Lock()
	r.faults = total
	r.mu.Unlock()
	r.log.Info("faults done, healing", "faults", total, "counts", counts)

	// Heal everything and let the clients see a healthy cluster for a
	// moment: a cluster that does not come back is a finding too.
	if err := nemesis.HealAll(cl); err != nil {
		r.harnessErr("heal: %v", err)
	}
	unhealthy := ""
	if err := cluster.WaitHealthy(context.WithoutCancel(ctx), pinned, endpoints, 30*time.Second, r.log); err != nil {
		unhealthy = fmt.Sprintf("cluster did not recover within 30s after every fault was healed: %v", err)
		r.log.Error(unhealthy)
	}
	if ctx.Err() == nil {
		time.Sleep(2 * time.Second)
	}
	close(finishLeases)
	stopClients()
	clients.Wait()
	r.mu.Lock()
	el := r.el
	r.mu.Unlock()
	if el != nil {
		el.Stop(5 * time.Second)
	}
	if cached != nil {
		cached.Stop(5 * time.Second)
	}
	r.log.Info("clients stopped; waiting for the last leases to go")
	leases.Wait()
	stopLeases()

	// Final reads, then the marker, then every watcher must reach it.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer fcancel()
	if err := workload.FinalRead(fctx, env, workload.SetPrefix); err != nil {
		r.harnessErr("%v", err)
	}
	if _, err := workload.WriteMarker(fctx, env); err != nil {
		r.harnessErr("%v", err)
	} else {
		for _, w := range ws {
			select {
			case <-w.Marker():
			case <-fctx.Done():
				r.log.Error("watcher did not see the marker", "member", w.Member())
			}
		}
		for i := range n {
			if err := workload.FullHistory(fctx, env, i, 20*time.Second); err != nil {
				r.harnessErr("%v", err)
			}
		}
	}
	stopWatch()
	watchers.Wait()
	stopMon()
	mon.Wait()
	return r.finish(rec, cl, unhealthy)
}

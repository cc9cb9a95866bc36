package main

// Starting what a run needs: the cluster, auth, and the holder processes
// of the election and cached-read workloads.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/test/jepsen-lite/internal/cluster"
	"github.com/corenode/corenode/test/jepsen-lite/internal/workload"
)

// startElection starts the election workload's holder processes: this
// binary again, with the hidden holder subcommand.
func (r *runner) startElection(env *workload.Env, endpoints, modes []string) (*workload.Election, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("election workload: own binary: %w", err)
	}
	el := workload.NewElection(env, workload.ElectionConfig{
		Exe: exe, Endpoints: endpoints, Modes: modes, Holders: r.cfg.Holders, TTL: r.cfg.HolderTTL,
		ActEvery: 5 * time.Millisecond, WriteEvery: 50 * time.Millisecond,
		LogDir: r.cfg.Out, RestartAfter: 200 * time.Millisecond, ClockDir: r.cfg.clockDir(),
	})
	if err := el.Start(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.el = el
	r.mu.Unlock()
	return el, nil
}

// startCached starts the cached-read workload's reader processes: this
// binary again, with the hidden cache-reader subcommand. Its writers are
// started with the other clients.
func (r *runner) startCached(env *workload.Env, endpoints []string) (*workload.Cached, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cached-read workload: own binary: %w", err)
	}
	cr := workload.NewCached(env, workload.CachedConfig{
		Exe: exe, Endpoints: endpoints, Readers: r.cfg.CacheReaders, Keys: r.cfg.CacheKeys, Seed: r.cfg.Seed,
		ReadEvery: 10 * time.Millisecond, WriteEvery: 40 * time.Millisecond,
		LogDir: r.cfg.Out, RestartAfter: 200 * time.Millisecond, ClockDir: r.cfg.clockDir(),
	})
	if err := cr.Start(); err != nil {
		cr.Stop(time.Second)
		return nil, err
	}
	r.mu.Lock()
	r.cr = cr
	r.mu.Unlock()
	return cr, nil
}

func (r *runner) startCluster(ctx context.Context) (cluster.Cluster, error) {
	cfg := r.cfg
	root, err := cluster.ModuleRoot()
	if err != nil {
		return nil, err
	}
	if cfg.Docker {
		c, err := cluster.StartCompose(ctx, cluster.ComposeConfig{
			File: filepath.Join(root, cfg.Compose), Members: cfg.Members, LogDir: cfg.Out, Log: r.log,
			Image: cfg.DockerImage, Build: filepath.Join(root, "deploy", "build"),
		})
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	bin := cfg.Binary
	if bin == "" {
		dir, err := os.MkdirTemp("", "jepsen-lite-bin-")
		if err != nil {
			return nil, fmt.Errorf("temp dir for the binary: %w", err)
		}
		r.mu.Lock()
		r.tempDirs = append(r.tempDirs, dir)
		r.mu.Unlock()
		start := time.Now()
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if bin, err = cluster.Build(bctx, root, dir); err != nil {
			return nil, err
		}
		r.log.Info("built corenode", "in", time.Since(start).Round(time.Millisecond))
	}
	data, err := os.MkdirTemp("", "jepsen-lite-data-")
	if err != nil {
		return nil, fmt.Errorf("temp dir for the data: %w", err)
	}
	settings := cluster.DefaultSettings
	settings.ReadLeaseMS = int(cfg.ReadLease.Milliseconds())
	if cfg.Auth == "jwt" {
		if settings.AuthToken, err = cluster.JWTFlag(cfg.Out); err != nil {
			os.RemoveAll(data)
			return nil, err
		}
	}
	if dir := cfg.clockDir(); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			os.RemoveAll(data)
			return nil, fmt.Errorf("clock-rate fault: %w", err)
		}
	}
	c, err := cluster.StartProcesses(ctx, cluster.ProcessConfig{
		Binary: bin, Members: cfg.Members, DataDir: data, LogDir: cfg.Out,
		Settings: settings, Seed: cfg.Seed, Log: r.log, ClockDir: cfg.clockDir(),
	})
	if err != nil {
		os.RemoveAll(data)
		return nil, err
	}
	return &removeOnClose{Cluster: c, dir: data}, nil
}

// enableAuth turns auth on as an operator would, through a client that
// has not logged in, and returns one root client per member.
func (r *runner) enableAuth(ctx context.Context, endpoints []string) ([]*clientv3.Client, error) {
	cli, err := cluster.NewClientAs(endpoints, "", "")
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cluster.EnableAuth(actx, cli); err != nil {
		return nil, err
	}
	admin := make([]*clientv3.Client, len(endpoints))
	for i, ep := range endpoints {
		if admin[i], err = cluster.NewClientAs([]string{ep}, cluster.RootUser, cluster.RootPassword); err != nil {
			for _, c := range admin[:i] {
				c.Close()
			}
			return nil, err
		}
	}
	r.log.Info("auth enabled", "tokens", r.cfg.Auth, "clients as", cluster.WorkloadUser)
	return admin, nil
}

// removeOnClose deletes the members' data once they are stopped.
type removeOnClose struct {
	cluster.Cluster
	dir string
}

func (r *removeOnClose) Close() error {
	err := r.Cluster.Close()
	return errors.Join(err, os.RemoveAll(r.dir))
}

func (r *removeOnClose) KillNow() {
	r.Cluster.KillNow()
	// SIGKILL is not instant; a member still writing could leave a file.
	time.Sleep(200 * time.Millisecond)
	_ = os.RemoveAll(r.dir)
}

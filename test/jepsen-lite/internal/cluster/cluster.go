// Package cluster is the system under test: corenode members as local
// processes behind a fault-injecting proxy, or as containers of
// deploy/docker-compose.yml, with the faults each can suffer.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ErrUnsupported is returned by a fault that this kind of cluster cannot
// inject (e.g. per-link latency between containers on one bridge).
var ErrUnsupported = errors.New("fault not supported by this cluster")

// ErrNotRunning is returned by a signal to a member that is not running.
var ErrNotRunning = errors.New("member is not running")

// Caps says which network faults a cluster can inject.
type Caps struct {
	// PairCuts: any set of member pairs can be cut (partitions of any
	// shape, bridges); without it only whole members can be isolated.
	PairCuts bool
	Slow     bool
	Lossy    bool
	// ClockRate: each member's lease clock runs at the rate in its
	// ClockFile, which can change during the run.
	ClockRate bool
}

// Cluster is a running corenode cluster the nemesis can hurt.
type Cluster interface {
	Size() int
	Name(i int) string
	// Endpoint is member i's client address (host:port) for clientv3.
	Endpoint(i int) string
	Caps() Caps

	// Kill is SIGKILL: no flush, no leadership handover.
	Kill(ctx context.Context, i int) error
	// Start restarts a killed member on its data.
	Start(ctx context.Context, i int) error
	Pause(ctx context.Context, i int) error
	Resume(ctx context.Context, i int) error

	// Isolate cuts member i from every other member.
	Isolate(ctx context.Context, i int) error
	// Cut drops the link between a and b, both ways (needs Caps.PairCuts).
	Cut(ctx context.Context, a, b int) error
	// Slow adds latency to every peer link (needs Caps.Slow).
	Slow(ctx context.Context, delay, jitter time.Duration) error
	// Lossy makes every peer link stall and reset at random (Caps.Lossy).
	Lossy(ctx context.Context, stallProb float64, maxStall time.Duration, resetProb float64) error
	// HealNetwork lifts every network fault.
	HealNetwork(ctx context.Context) error
	// ClockFile is the file member i's lease clock takes its rate from
	// (internal/rateclock; needs Caps.ClockRate); "" when it has none.
	ClockFile(i int) string

	// Problems lists what went wrong inside members that no client sees
	// directly: panics, unexpected exits, data races in their logs.
	Problems() []string
	// Close stops every member and removes what the cluster created.
	Close() error
	// KillNow is the last resort on a hard deadline or a second signal:
	// kill everything at once, without waiting.
	KillNow()
}

// Settings are the timing flags every member runs with; the lease checker
// derives its bounds from the same numbers.
type Settings struct {
	HeartbeatMS     int
	ElectionMS      int
	LeaseTickMS     int
	LeaseCheckpoint int // --lease-checkpoint-after, ms
	// ReadLeaseMS is --read-lease-duration, the read lease the leader
	// grants to client/cache sessions, in ms (0: the flag is not passed).
	ReadLeaseMS int
	// AuthToken is --auth-token ("": the flag is not passed).
	AuthToken string
}

// DefaultSettings are corenode's defaults, passed explicitly so that a
// change of the binary's defaults does not silently change the bounds.
// The docker-compose deployment passes none of these flags, so its members
// run with the binary's defaults, which these mirror (cluster_test.go
// holds them to it where it can).
var DefaultSettings = Settings{HeartbeatMS: 100, ElectionMS: 1000, LeaseTickMS: 100, LeaseCheckpoint: 1000, ReadLeaseMS: 2000}

func (s Settings) flags() []string {
	f := []string{
		"--heartbeat-interval", fmt.Sprint(s.HeartbeatMS),
		"--election-timeout", fmt.Sprint(s.ElectionMS),
		"--lease-tick", fmt.Sprint(s.LeaseTickMS),
		"--lease-checkpoint-after", fmt.Sprint(s.LeaseCheckpoint),
	}
	if s.ReadLeaseMS > 0 {
		f = append(f, "--read-lease-duration", fmt.Sprintf("%dms", s.ReadLeaseMS))
	}
	if s.AuthToken != "" {
		f = append(f, "--auth-token", s.AuthToken)
	}
	return f
}

// ReadLease is ReadLeaseMS as a duration.
func (s Settings) ReadLease() time.Duration { return time.Duration(s.ReadLeaseMS) * time.Millisecond }

// NewClient is a clientv3 client for the given endpoints with the logging
// of its retries silenced (the history records what matters). It logs in
// as AuthEnv says, if it says.
func NewClient(endpoints []string) (*clientv3.Client, error) {
	user, password := credentials()
	return NewClientAs(endpoints, user, password)
}

// NewClientAs is NewClient logged in as user ("" for nobody).
func NewClientAs(endpoints []string, user, password string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		// gRPC's floor; members permit pings every 5 s. It lets a client
		// with several endpoints notice a paused member and move on.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		Logger:               zap.NewNop(),
		Username:             user,
		Password:             password,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: client for %v: %w", endpoints, err)
	}
	return c, nil
}

// Status is one member's view: its ID, the leader it knows and the term.
type Status struct {
	Member int
	ID     uint64
	Leader uint64
	Term   uint64
	Err    error
}

// StatusAll asks every member for its status, in parallel.
func StatusAll(ctx context.Context, clients []*clientv3.Client, endpoints []string, timeout time.Duration) []Status {
	out := make([]Status, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			s, err := c.Status(cctx, endpoints[i])
			out[i] = Status{Member: i, Err: err}
			if err == nil {
				out[i].ID, out[i].Leader, out[i].Term = s.Header.MemberId, s.Leader, s.RaftTerm
			}
		}()
	}
	wg.Wait()
	return out
}

// Leader is the member that says it leads, at the highest term among those
// that do; -1 when none does.
func Leader(st []Status) int {
	best, term := -1, uint64(0)
	for _, s := range st {
		if s.Err == nil && s.ID != 0 && s.ID == s.Leader && s.Term >= term {
			best, term = s.Member, s.Term
		}
	}
	return best
}

// WaitHealthy waits until every member answers Status, all agree on one
// leader, and a linearizable read succeeds through each member.
func WaitHealthy(ctx context.Context, clients []*clientv3.Client, endpoints []string, timeout time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		last = healthy(ctx, clients, endpoints)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: not healthy after %v: %w", timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
		log.Debug("waiting for a healthy cluster", "err", last)
	}
}

func healthy(ctx context.Context, clients []*clientv3.Client, endpoints []string) error {
	st := StatusAll(ctx, clients, endpoints, time.Second)
	var leader uint64
	for _, s := range st {
		if s.Err != nil {
			return fmt.Errorf("member %d: %w", s.Member, s.Err)
		}
		if s.Leader == 0 {
			return fmt.Errorf("member %d knows no leader", s.Member)
		}
		if leader != 0 && s.Leader != leader {
			return fmt.Errorf("members disagree on the leader (%x, %x)", leader, s.Leader)
		}
		leader = s.Leader
	}
	for i, c := range clients {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Get(cctx, "jl-health")
		cancel()
		if err != nil {
			return fmt.Errorf("member %d: linearizable read: %w", i, err)
		}
	}
	return nil
}

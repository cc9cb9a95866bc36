package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/corenode/corenode/api/cachepb"
)

// leaderDialTimeout bounds how long a session waits for a connection to the
// leader's own client URL before it goes through the client's connection
// instead. A URL the client cannot reach (members advertising addresses
// that only resolve inside their network, a client behind a proxy) costs
// this once per leader, not once per session.
const leaderDialTimeout = time.Second

// leaderDialer opens sessions on a connection to the leader itself when it
// can. Any member serves a session, a follower by relaying it to the
// leader, so this only saves the relay's hop each way: an invalidation
// reaches the holder and its acknowledgement reaches the leader sooner,
// and a write on a key the cache holds waits less (BENCHMARKS.md, "Read
// leases"). It changes nothing the guarantee rests on.
//
// Not safe for concurrent use: only the session goroutine (Cache.run)
// calls it.
type leaderDialer struct {
	cli *clientv3.Client
	log *slog.Logger
	// conn is the connection to member id's client URL, kept while that
	// member leads.
	conn *grpc.ClientConn
	id   uint64
	// unreachable is a leader whose URL could not be reached: sessions go
	// through cli's connection while it leads, until another leader's URL
	// is reached.
	unreachable uint64
}

// client returns the client the next session should be opened with: one on
// a connection to the leader, or, when the leader or its URL cannot be
// found or reached, fallback (cli's connection, which any member serves).
// A nil dialer (a cache built on a bare CacheClient) always returns
// fallback.
func (d *leaderDialer) client(ctx context.Context, fallback cachepb.CacheClient) cachepb.CacheClient {
	if d == nil {
		return fallback
	}
	id, url, err := d.leader(ctx)
	if err != nil || id == d.unreachable {
		return fallback
	}
	if d.conn != nil && d.id == id {
		return cachepb.NewCacheClient(d.conn)
	}
	d.close()
	conn, err := d.cli.Dial(url)
	if err == nil {
		err = awaitReady(ctx, conn, leaderDialTimeout)
		if err != nil {
			conn.Close()
		}
	}
	if err != nil {
		d.unreachable = id
		d.log.Warn("cache: the leader's client URL cannot be reached; sessions go through the client's endpoints while it leads",
			"leader", fmt.Sprintf("%x", id), "url", url, "error", err)
		return fallback
	}
	d.conn, d.id, d.unreachable = conn, id, 0
	return cachepb.NewCacheClient(conn)
}

// leader asks the client's endpoints at once which member leads (one
// paused or partitioned member must not hold the session up), and returns
// the first answer's leader with its first client URL.
func (d *leaderDialer) leader(ctx context.Context) (uint64, string, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderDialTimeout)
	defer cancel()
	eps := d.cli.Endpoints()
	answers := make(chan uint64, len(eps))
	errs := make(chan error, len(eps))
	for _, ep := range eps {
		go func() {
			st, err := d.cli.Status(ctx, ep)
			switch {
			case err != nil:
				errs <- err
			case st.Leader == 0:
				errs <- fmt.Errorf("%s knows no leader", ep)
			default:
				answers <- st.Leader
			}
		}()
	}
	var id uint64
	err := errors.New("no endpoints")
	for i := 0; i < len(eps) && id == 0; i++ {
		select {
		case id = <-answers:
		case err = <-errs:
		}
	}
	if id == 0 {
		return 0, "", fmt.Errorf("find the leader: %w", err)
	}
	members, err := d.cli.MemberList(ctx)
	if err != nil {
		return 0, "", fmt.Errorf("list members: %w", err)
	}
	for _, m := range members.Members {
		if m.ID == id && len(m.ClientURLs) > 0 {
			return id, m.ClientURLs[0], nil
		}
	}
	return 0, "", fmt.Errorf("leader %x has no client URL in the member list", id)
}

// awaitReady returns once conn is connected, or an error once its first
// attempt failed (refused, unresolvable) or after timeout (no answer).
func awaitReady(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("connect: %s", s)
		}
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("connect: %w (last state %s)", ctx.Err(), s)
		}
	}
}

func (d *leaderDialer) close() {
	if d != nil && d.conn != nil {
		d.conn.Close()
		d.conn, d.id = nil, 0
	}
}

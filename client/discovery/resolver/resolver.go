package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	gresolver "google.golang.org/grpc/resolver"

	"github.com/corenode/corenode/client/discovery"
)

// Scheme is the URI scheme this resolver serves.
const Scheme = "corenode"

// A list is a linearizable read; one that takes longer than listTimeout is
// reported to gRPC and tried again. Between failed tries the resolver waits
// from minBackoff up to maxBackoff, or until gRPC asks it to resolve now.
const (
	listTimeout = 5 * time.Second
	minBackoff  = 100 * time.Millisecond
	maxBackoff  = 2 * time.Second
)

// Option changes a Builder.
type Option func(*Builder)

// WithLogger logs to l instead of slog.Default().
func WithLogger(l *slog.Logger) Option { return func(b *Builder) { b.log = l } }

// Builder builds resolvers that read endpoints through one clientv3
// client. It is safe for concurrent use; the resolvers it builds end when
// gRPC closes them or when the client is closed.
type Builder struct {
	cli *clientv3.Client
	log *slog.Logger
}

// NewBuilder returns a Builder for the scheme "corenode" that reads through
// cli. Pass it to grpc.NewClient with grpc.WithResolvers.
func NewBuilder(cli *clientv3.Client, opts ...Option) *Builder {
	b := &Builder{cli: cli, log: slog.Default()}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Register builds a Builder and registers it in gRPC's global registry, so
// that "corenode:///..." targets resolve without grpc.WithResolvers. As
// gRPC's resolver.Register requires, call it only while the program starts
// (in an init function or before any client is made), and once.
func Register(cli *clientv3.Client, opts ...Option) *Builder {
	b := NewBuilder(cli, opts...)
	gresolver.Register(b)
	return b
}

// Scheme is "corenode".
func (b *Builder) Scheme() string { return Scheme }

// Build starts watching the service named by target's path
// ("corenode:///myservice" watches "myservice/"). It does not block: the
// first endpoint set reaches cc once listed.
func (b *Builder) Build(target gresolver.Target, cc gresolver.ClientConn, _ gresolver.BuildOptions) (gresolver.Resolver, error) {
	service := target.Endpoint()
	if service == "" {
		return nil, fmt.Errorf("corenode resolver: target %q names no service (want corenode:///SERVICE)", target.URL.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	// A closed client ends the watch too, and gRPC hears of it.
	stop := context.AfterFunc(b.cli.Ctx(), cancel)
	r := &resolver{
		cli:     b.cli,
		cc:      cc,
		prefix:  discovery.Prefix(service),
		log:     b.log.With("service", service),
		cancel:  func() { stop(); cancel() },
		done:    make(chan struct{}),
		resolve: make(chan struct{}, 1),
	}
	go r.run(ctx)
	return r, nil
}

// resolver lists a service's endpoints, then follows them with a watch
// from the listed revision; when the watch fails (compacted, cancelled,
// closed) it lists again. Only its goroutine calls cc, and Close waits for
// that goroutine, so cc is never called after Close returns.
type resolver struct {
	cli     *clientv3.Client
	cc      gresolver.ClientConn
	prefix  string
	log     *slog.Logger
	cancel  context.CancelFunc
	closed  atomic.Bool // Close was called
	done    chan struct{}
	resolve chan struct{} // ResolveNow's hint: cut a backoff short

	last []string // the addresses last given to cc, sorted
	sent bool     // whether cc has been given any state yet
}

// ResolveNow cuts short the wait before the next list after a failure.
// While the watch is healthy there is nothing to resolve: every change
// already reached gRPC.
func (r *resolver) ResolveNow(gresolver.ResolveNowOptions) {
	select {
	case r.resolve <- struct{}{}:
	default:
	}
}

// Close stops the watch and waits until the resolver will call gRPC no
// more.
func (r *resolver) Close() {
	r.closed.Store(true)
	r.cancel()
	<-r.done
}

func (r *resolver) run(ctx context.Context) {
	defer close(r.done)
	backoff := minBackoff
	for {
		healthy, err := r.listAndWatch(ctx)
		if ctx.Err() != nil {
			r.end()
			return
		}
		if healthy {
			backoff = minBackoff
		}
		// A watch that worked for a while, or whose history was compacted
		// (a fresh list starts it at a revision that still exists), is
		// mended by listing again at once. A list that fails, or a watch
		// refused from the start, would fail again just as fast.
		if healthy || errors.Is(err, rpctypes.ErrCompacted) {
			r.log.Info("endpoint watch ended; listing again", "err", err)
			continue
		}
		r.log.Warn("following endpoints failed", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-r.resolve:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			r.end()
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// end tells gRPC, unless it closed the resolver itself, that the endpoints
// are no longer followed: the client was closed.
func (r *resolver) end() {
	if !r.closed.Load() {
		r.cc.ReportError(errors.New("corenode resolver: the etcd client was closed; endpoints are no longer followed"))
	}
}

// listAndWatch gives cc the listed endpoint set, then every change to it,
// until the watch fails or ctx ends. It reports whether the watch delivered
// anything before it failed, and why it returned.
func (r *resolver) listAndWatch(ctx context.Context) (healthy bool, err error) {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	resp, err := r.cli.Get(lctx, r.prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		err = fmt.Errorf("list %s: %w", r.prefix, err)
		if ctx.Err() == nil {
			r.cc.ReportError(err)
		}
		return false, err
	}
	set := make(map[string]string, len(resp.Kvs)) // key -> address
	for _, kv := range resp.Kvs {
		r.put(set, string(kv.Key), kv.Value)
	}
	r.update(set)

	// A watch stream that outlives this call would leak in clientv3:
	// cancel it on every return. Asking for a leader makes etcd cancel the
	// watch when its member loses the leader, so a partitioned member's
	// silence is not taken for "no changes"; corenode does not act on the
	// request yet (docs/discovery.md).
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	wch := r.cli.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for wresp := range wch {
		if err := wresp.Err(); err != nil {
			return healthy, fmt.Errorf("watch %s: %w", r.prefix, err)
		}
		healthy = true
		for _, ev := range wresp.Events {
			switch ev.Type {
			case clientv3.EventTypePut:
				r.put(set, string(ev.Kv.Key), ev.Kv.Value)
			case clientv3.EventTypeDelete:
				delete(set, string(ev.Kv.Key))
			}
		}
		r.update(set)
	}
	return healthy, errors.New("watch closed")
}

// put records the endpoint stored under key; a record that does not decode
// is left out (with a warning), as etcd's resolver does.
func (r *resolver) put(set map[string]string, key string, value []byte) {
	ep, err := discovery.Decode(value)
	if err != nil {
		r.log.Warn("skipping endpoint record", "key", key, "err", err)
		delete(set, key)
		return
	}
	set[key] = ep.Addr
}

// update gives cc the addresses in set, once each, unless they are the ones
// it has already.
func (r *resolver) update(set map[string]string) {
	addrs := make([]string, 0, len(set))
	for _, a := range set {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	if r.sent && slices.Equal(addrs, r.last) {
		return
	}
	r.last, r.sent = addrs, true
	eps := make([]gresolver.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = gresolver.Endpoint{Addresses: []gresolver.Address{{Addr: a}}}
	}
	r.log.Debug("endpoints", "addrs", addrs)
	// The resolver is watch-based: gRPC's error here (an empty set, for
	// pick_first) would not change by resolving again, and the next change
	// arrives through the watch.
	if err := r.cc.UpdateState(gresolver.State{Endpoints: eps}); err != nil {
		r.log.Debug("gRPC refused the endpoint set", "addrs", addrs, "err", err)
	}
}

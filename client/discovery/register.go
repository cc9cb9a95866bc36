package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// Re-registration backoff: the first try after a loss is immediate, and a
// cluster without quorum is asked no more often than every maxBackoff. A
// try that hangs (on a member cut off from the others) is given up after
// tryTimeout, so that the next can reach a member that answers.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 2 * time.Second
	// defaultTryTimeout is WithTryTimeout's default.
	defaultTryTimeout = 5 * time.Second
)

// EventKind says what happened to a registration.
type EventKind int

const (
	// Lost: the endpoint's lease expired, was revoked by someone else, or
	// its keep-alives went unanswered for a whole TTL. Readers may no
	// longer see the endpoint; the registration is re-registering it.
	Lost EventKind = iota + 1
	// Reregistered: after a Lost, the endpoint is stored again under a
	// new lease.
	Reregistered
)

func (k EventKind) String() string {
	switch k {
	case Lost:
		return "lost"
	case Reregistered:
		return "reregistered"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event tells the holder of a registration that its endpoint went missing
// or came back.
type Event struct {
	Kind EventKind
	// Lease is the lease that was lost, or the new one.
	Lease clientv3.LeaseID
	// Err says why the lease was lost; nil for Reregistered.
	Err error
}

// Option changes how Register keeps an endpoint registered.
type Option func(*options)

type options struct {
	logger     *slog.Logger
	metadata   any
	notify     func(Event)
	tryTimeout time.Duration
}

// WithTryTimeout bounds each try to store the endpoint, the first one in
// Register and each one after a loss (default 5 s): a try that hangs, on a
// cluster without quorum or a member cut off from it, is given up, so that
// Register returns an error and re-registration tries again.
func WithTryTimeout(d time.Duration) Option { return func(o *options) { o.tryTimeout = d } }

// WithLogger logs to l instead of slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMetadata stores md in the endpoint record's Metadata field, as
// endpoints.Endpoint does; md must marshal to JSON.
func WithMetadata(md any) Option { return func(o *options) { o.metadata = md } }

// WithNotify calls f with every Lost and Reregistered event. f is called
// from the registration's own goroutine, one event at a time, in order; the
// registration waits for f to return before it re-registers, so f must not
// block (send to a buffered channel, or hand off).
func WithNotify(f func(Event)) Option { return func(o *options) { o.notify = f } }

// Registration is an endpoint kept registered by Register.
//
// One goroutine, started by Register, keeps the lease alive, re-registers
// after a loss and revokes the lease at the end; Done is closed when it has
// exited. The methods are safe for concurrent use.
type Registration struct {
	cli  *clientv3.Client
	mgr  endpoints.Manager
	key  string
	addr string
	ttl  int64 // asked for, in seconds
	opts options
	log  *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	lease   clientv3.LeaseID // 0 while lost
	granted int64            // the TTL the server answered, in seconds
	err     error            // how the registration ended, set before done closes
}

// Register stores the endpoint addr of service under a lease of ttl
// (rounded up to whole seconds; the server may raise it, corenode to one
// and a half election timeouts) and keeps it there until ctx ends or
// Deregister is called; either revokes the lease, so the endpoint vanishes
// at once rather than a TTL later.
//
// Register returns once the endpoint is stored, or with an error if the
// first grant or put fails. After that, the lease is kept alive across
// transient errors and leader changes by clientv3's keep-alive; when the
// lease is lost (it expired during a partition longer than the TTL, say),
// the endpoint is re-registered under a new lease, retrying until it is
// stored again, and WithNotify hears of both. If cli is closed the
// registration ends without revoking: the endpoint expires after its TTL.
//
// The key is Key(service, addr) and the value endpoints.Manager's record,
// so etcd's naming packages read it. Register one endpoint per service and
// address: two registrations of the same pair overwrite each other's key.
func Register(ctx context.Context, cli *clientv3.Client, service, addr string, ttl time.Duration, opts ...Option) (*Registration, error) {
	if cli == nil || service == "" || addr == "" || ttl <= 0 {
		return nil, fmt.Errorf("register %q at %q: need a client, a service, an address and a positive TTL", service, addr)
	}
	r := &Registration{
		cli:  cli,
		key:  Key(service, addr),
		addr: addr,
		ttl:  int64((ttl + time.Second - 1) / time.Second),
		opts: options{logger: slog.Default(), tryTimeout: defaultTryTimeout},
		done: make(chan struct{}),
	}
	for _, o := range opts {
		o(&r.opts)
	}
	r.log = r.opts.logger.With("service", service, "addr", addr)
	mgr, err := endpoints.NewManager(cli, service)
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", r.key, err)
	}
	r.mgr = mgr
	tctx, cancel := context.WithTimeout(ctx, r.opts.tryTimeout)
	err = r.register(tctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", r.key, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	go r.run(runCtx)
	return r, nil
}

// Key is the key the endpoint is stored under.
func (r *Registration) Key() string { return r.key }

// Lease is the lease the endpoint is stored under, and 0 while it is lost
// and being re-registered.
func (r *Registration) Lease() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// TTL is the lease's TTL as the server granted it, which may be longer
// than the one asked for.
func (r *Registration) TTL() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.granted) * time.Second
}

// Done is closed once the registration has ended (Deregister, the end of
// Register's ctx, the client closed, or the client halted its keep-alives
// for good) and its lease revoke was tried; Deregister then says how it
// ended.
func (r *Registration) Done() <-chan struct{} { return r.done }

// Deregister ends the registration: it stops the keep-alives and revokes
// the lease, so the endpoint disappears from readers at once. It waits until
// the revoke is answered or ctx ends, and returns the revoke's error: if the
// revoke failed the endpoint expires after its TTL instead. Calling it again,
// or after Register's ctx ended, returns the same outcome.
func (r *Registration) Deregister(ctx context.Context) error {
	r.cancel()
	select {
	case <-r.done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("deregister %s: %w", r.key, ctx.Err())
	}
}

// register grants a lease and stores the endpoint under it.
func (r *Registration) register(ctx context.Context) error {
	g, err := r.cli.Grant(ctx, r.ttl)
	if err != nil {
		return fmt.Errorf("grant lease: %w", err)
	}
	ep := endpoints.Endpoint{Addr: r.addr, Metadata: r.opts.metadata}
	if err := r.mgr.AddEndpoint(ctx, r.key, ep, clientv3.WithLease(g.ID)); err != nil {
		// Nothing is attached to the new lease: revoking it only saves the
		// server from tracking it for a TTL.
		r.revoke(context.WithoutCancel(ctx), g.ID, g.TTL)
		return fmt.Errorf("put under lease %x: %w", g.ID, err)
	}
	r.mu.Lock()
	r.lease, r.granted = g.ID, g.TTL
	r.mu.Unlock()
	r.log.Info("endpoint registered", "lease", fmt.Sprintf("%x", g.ID), "ttl_s", g.TTL)
	return nil
}

// run keeps the registration alive until ctx ends or the client closes.
func (r *Registration) run(ctx context.Context) {
	defer close(r.done)
	for {
		lease := r.Lease()
		lost, halted := r.keepAlive(ctx, lease)
		if ctx.Err() != nil {
			r.end(ctx, lease)
			return
		}
		if r.clientClosed(lease) {
			return
		}
		if halted {
			// The client keeps no lease alive any more (an error it does
			// not retry, such as a permission denied): re-registering
			// would only spin. End, and let the caller see it in Done.
			r.log.Error("endpoint registration ended: the client stopped keeping leases alive", "err", lost)
			r.end(ctx, lease)
			r.mu.Lock()
			r.err = errors.Join(lost, r.err)
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		r.lease = 0
		r.mu.Unlock()
		r.log.Warn("endpoint lease lost; registering again", "lease", fmt.Sprintf("%x", lease), "err", lost)
		r.notify(Event{Kind: Lost, Lease: lease, Err: lost})
		if !r.reregister(ctx, lease) {
			if ctx.Err() != nil {
				r.end(ctx, r.Lease())
			}
			return
		}
	}
}

// keepAlive renews lease until it is lost or ctx ends, and says why it
// stopped, and whether because the client halted all keep-alives.
func (r *Registration) keepAlive(ctx context.Context, lease clientv3.LeaseID) (stopped error, halted bool) {
	ch, err := r.cli.KeepAlive(ctx, lease)
	if err != nil {
		return fmt.Errorf("keep lease %x alive: %w", lease, err), true
	}
	// clientv3 retries on transient errors and follows leader changes; it
	// closes the channel only when the server says the lease is gone or no
	// renewal was answered for a whole TTL. The answers must be read, or
	// clientv3 drops them with a warning.
	for range ch {
	}
	return fmt.Errorf("lease %x gone, or unanswered for its TTL", lease), false
}

// reregister stores the endpoint again under a new lease, retrying with a
// backoff, and reports whether it did before ctx ended or the client closed.
func (r *Registration) reregister(ctx context.Context, old clientv3.LeaseID) bool {
	backoff := minBackoff
	for {
		tctx, cancel := context.WithTimeout(ctx, r.opts.tryTimeout)
		err := r.register(tctx)
		cancel()
		if err == nil {
			// The old lease may still exist, if only its answers were
			// lost; the key has moved to the new lease, so revoking the old
			// one removes nothing and frees the server of it.
			r.revoke(ctx, old, r.ttl)
			r.notify(Event{Kind: Reregistered, Lease: r.Lease()})
			return true
		}
		if ctx.Err() != nil || r.clientClosed(0) {
			return false
		}
		r.log.Warn("registering endpoint again failed", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// end revokes lease (if any) after the registration was asked to end, and
// records the outcome for Deregister.
func (r *Registration) end(ctx context.Context, lease clientv3.LeaseID) {
	var err error
	if lease != 0 {
		r.mu.Lock()
		ttl := r.granted
		r.mu.Unlock()
		err = r.revoke(context.WithoutCancel(ctx), lease, ttl)
	}
	if err != nil {
		r.log.Warn("endpoint deregistered; it stays until its lease expires", "err", err)
	} else {
		r.log.Info("endpoint deregistered")
	}
	r.mu.Lock()
	r.lease, r.err = 0, err
	r.mu.Unlock()
}

// revoke revokes lease, waiting at most its TTL: after that the lease has
// expired anyway.
func (r *Registration) revoke(ctx context.Context, lease clientv3.LeaseID, ttl int64) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(max(ttl, 1))*time.Second)
	defer cancel()
	if _, err := r.cli.Revoke(ctx, lease); err != nil {
		return fmt.Errorf("revoke lease %x of %s: %w", lease, r.key, err)
	}
	return nil
}

// clientClosed reports whether the client was closed under the
// registration, and if so ends it: nothing can be revoked any more.
func (r *Registration) clientClosed(lease clientv3.LeaseID) bool {
	if r.cli.Ctx().Err() == nil {
		return false
	}
	err := errors.New("client closed; the endpoint stays until its lease expires")
	if lease != 0 {
		err = fmt.Errorf("client closed; the endpoint stays until lease %x expires", lease)
	}
	r.log.Warn("endpoint registration ended", "err", err)
	r.mu.Lock()
	r.lease, r.err = 0, err
	r.mu.Unlock()
	return true
}

func (r *Registration) notify(e Event) {
	if r.opts.notify != nil {
		r.opts.notify(e)
	}
}

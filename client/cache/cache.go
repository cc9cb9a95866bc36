package cache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/api/cachepb"
)

// ErrClosed is returned by Get once Close has been called, including to a
// Get that was waiting for the leader when Close was called.
var ErrClosed = errors.New("cache: closed")

// Stats counts what a Cache did since New.
type Stats struct {
	// Hits are Gets answered from memory.
	Hits uint64
	// Misses are Gets that asked the leader (a Get that shared another's
	// request counts too).
	Misses uint64
	// Uncached are answers that came without a usable lease (the leader
	// granted none, or it had already run out on arrival) and were used
	// once, not kept.
	Uncached uint64
	// Invalidations are keys the leader asked the cache to drop, whether
	// or not it still held them.
	Invalidations uint64
	// Evictions are entries dropped to stay within WithMaxKeys.
	Evictions uint64
	// Reconnects are sessions opened after an earlier one broke or could
	// not be opened.
	Reconnects uint64
	// Keys is how many entries the cache holds now; some may have run out
	// and not been looked up since.
	Keys int
}

// Cache answers Gets of single keys linearizably, from memory while the
// leader's read lease on the key holds and from the leader otherwise. See
// the package documentation for the guarantee and its assumptions.
//
// All methods are safe for concurrent use.
type Cache struct {
	client cachepb.CacheClient
	// leader, when set, opens sessions on a connection to the leader
	// itself; client (any member) is the fallback.
	leader *leaderDialer
	cfg    config
	// ctx ends at Close and is the parent of every session, so Close ends
	// the stream and the goroutine that runs it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	started bool // the session goroutine runs (started by the first miss)
	opened  bool // a session was opened once, so the next one is a reconnect
	entries map[string]*entry
	lru     list.List // of *entry, most recently used first
	// calls are the requests not answered yet, by id: sent on the current
	// session, or waiting for the next one.
	calls map[uint64]*call
	// inflight is the unanswered call for each key, which concurrent Gets
	// of the key share.
	inflight map[string]*call
	nextID   uint64
	sess     *session // nil between sessions
	gen      uint64   // sessions opened so far; names the current one
	lastErr  error    // why the last session ended or failed to open
	stats    Stats
	// unreported counts hits not yet sent to the leader.
	unreported uint64
}

type entry struct {
	key      string
	kv       *mvccpb.KeyValue // nil: the key does not exist
	deadline time.Time
	elem     *list.Element
}

// call is one GetRequest and the Gets waiting for its answer. The answer
// fields are written under Cache.mu before done is closed, and read after
// done is closed.
type call struct {
	id      uint64
	key     string
	waiters int
	done    chan struct{}

	// gen is the session the request was last sent on (0: none yet), and
	// sendTime when, read before sending it there (argument A).
	gen      uint64
	sendTime time.Time
	// sends counts the times the request was sent, so a Get that joins the
	// call knows whether the answering send came after it joined.
	sends uint64

	kv       *mvccpb.KeyValue
	err      error
	leased   bool   // the answer was stored under a lease
	answered uint64 // sends at the time of the answer
	hits     uint64 // hits reported with the request
}

// session is one Session stream. grpc lets one goroutine send while another
// receives, but not two send at once: sendMu serializes Gets, resends and
// acknowledgements.
type session struct {
	gen    uint64
	stream cachepb.Cache_SessionClient
	sendMu sync.Mutex
	ended  chan struct{} // closed once the stream's receiving side ended
}

func (s *session) send(req *cachepb.SessionRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(req)
}

// New returns a cache that reads through cli's connection. It opens
// nothing yet: the session with the leader is opened by the first Get that
// misses, and kept (re-opened when it breaks) until Close.
func New(cli *clientv3.Client, opts ...Option) (*Cache, error) {
	if cli == nil {
		return nil, errors.New("cache: nil client")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	conn := cli.ActiveConnection()
	if conn == nil {
		return nil, errors.New("cache: client has no connection")
	}
	c := newCache(cachepb.NewCacheClient(conn), cfg)
	c.leader = &leaderDialer{cli: cli, log: cfg.logger}
	return c, nil
}

func newCache(client cachepb.CacheClient, cfg config) *Cache {
	ctx, cancel := context.WithCancel(context.Background())
	return &Cache{
		client:   client,
		cfg:      cfg,
		ctx:      ctx,
		cancel:   cancel,
		entries:  map[string]*entry{},
		calls:    map[uint64]*call{},
		inflight: map[string]*call{},
	}
}

// Get returns key's value, or nil (and a nil error) when the key does not
// exist; a missing key is cached like any other. The result is
// linearizable: it is never older than a value that a write completed
// before Get was called replaced.
//
// The returned KeyValue may be shared with other callers and the cache:
// callers must not modify it.
//
// An error is ErrClosed; ctx's error, wrapped (naming why the session with
// the leader is down, if it is); the leader's verdict on this request, as
// the gRPC status error it sent (status.Code reads its code); or, from a
// member that does not serve read leases, an error wrapping its
// Unimplemented status. While the session is down, Get waits for it to be
// re-opened, until ctx ends.
func (c *Cache) Get(ctx context.Context, key string) (*mvccpb.KeyValue, error) {
	missed := false
	c.mu.Lock()
	for {
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if e := c.entries[key]; e != nil {
			// Before the deadline, the leader lets no write of the key
			// through without our acknowledgement (argument B), which we
			// send only after deleting the entry under this mutex
			// (argument D); and our deadline comes before the leader's
			// (argument A). So the value is current at this instant, which
			// lies within this Get.
			if c.cfg.clock.Now().Before(e.deadline) {
				kv := e.kv
				c.lru.MoveToFront(e.elem)
				c.stats.Hits++
				c.unreported++
				c.mu.Unlock()
				return kv, nil
			}
			c.removeLocked(e)
		}
		if err := ctx.Err(); err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("cache: get %q: %w", key, err)
		}
		if !missed {
			missed = true
			c.stats.Misses++
		}
		cl, joined, send := c.joinLocked(key)
		c.mu.Unlock()
		if send != nil {
			// An error means the session broke; it is re-opened and the
			// request resent (cl.gen no longer names a live session).
			_ = send.send(getRequest(cl))
		}
		c.cfg.waiting(key)

		select {
		case <-cl.done:
		case <-ctx.Done():
			c.mu.Lock()
			c.leaveLocked(cl)
			lastErr := c.lastErr
			down := c.sess == nil && c.started && !c.closed
			c.mu.Unlock()
			if down && lastErr != nil {
				return nil, fmt.Errorf("cache: get %q: %w (session with the leader down: %v)", key, ctx.Err(), lastErr)
			}
			return nil, fmt.Errorf("cache: get %q: %w", key, ctx.Err())
		}
		if cl.err != nil {
			return nil, cl.err
		}
		// The leader read the value after receiving the answering send. If
		// that send came after this Get joined the call, the read lies
		// within this Get. If it came before (a Get that joined a request
		// already on its way), the read may precede this Get, and a write
		// may have completed in between; unless the value came with a
		// lease: then no write of the key completed before the answer
		// arrived (arguments A, B, D), so it was current then, within this
		// Get. Otherwise ask again.
		if cl.leased || joined < cl.answered {
			return cl.kv, nil
		}
		c.mu.Lock()
	}
}

// joinLocked adds a waiter to key's call, creating the call if there is
// none. It returns the call, how many times the call had been sent when
// the waiter joined, and the session to send the request on if the caller
// must send it (the call is new and a session is open).
func (c *Cache) joinLocked(key string) (cl *call, joined uint64, send *session) {
	if cl = c.inflight[key]; cl != nil {
		cl.waiters++
		return cl, cl.sends, nil
	}
	c.nextID++
	cl = &call{id: c.nextID, key: key, waiters: 1, done: make(chan struct{})}
	c.calls[cl.id] = cl
	c.inflight[key] = cl
	if !c.started {
		c.started = true
		c.wg.Add(1)
		go c.run()
	}
	if c.sess != nil {
		c.markSentLocked(cl, c.sess)
		send = c.sess
	}
	return cl, 0, send
}

// markSentLocked records that cl is about to be sent on s. sendTime is
// read before the send (argument A): the lease is measured from it.
func (c *Cache) markSentLocked(cl *call, s *session) {
	cl.gen = s.gen
	cl.sendTime = c.cfg.clock.Now()
	cl.sends++
	// Hits ride on the next request, for the leader's metrics.
	cl.hits += c.unreported
	c.unreported = 0
}

// leaveLocked removes a waiter whose ctx ended. A request on the wire on
// the live session stays registered, so that its answer is still stored if
// it carries a lease: the lease is as good as any other, and the leader
// counts it as ours (it will ask us to drop it) whether or not we keep it.
// A request not on the wire is forgotten: nobody wants the answer.
func (c *Cache) leaveLocked(cl *call) {
	cl.waiters--
	if cl.waiters > 0 || c.calls[cl.id] != cl {
		return
	}
	if c.sess == nil || cl.gen != c.sess.gen {
		c.forgetLocked(cl)
	}
}

// forgetLocked removes cl from the maps of unanswered calls.
func (c *Cache) forgetLocked(cl *call) {
	delete(c.calls, cl.id)
	if c.inflight[cl.key] == cl {
		delete(c.inflight, cl.key)
	}
}

// finishLocked ends cl with err, waking its waiters.
func (c *Cache) finishLocked(cl *call, err error) {
	c.forgetLocked(cl)
	cl.err = err
	close(cl.done)
}

func (c *Cache) storeLocked(key string, kv *mvccpb.KeyValue, deadline time.Time) {
	if e := c.entries[key]; e != nil {
		e.kv, e.deadline = kv, deadline
		c.lru.MoveToFront(e.elem)
		return
	}
	e := &entry{key: key, kv: kv, deadline: deadline}
	e.elem = c.lru.PushFront(e)
	c.entries[key] = e
	for c.lru.Len() > c.cfg.maxKeys {
		c.removeLocked(c.lru.Back().Value.(*entry))
		c.stats.Evictions++
	}
}

func (c *Cache) removeLocked(e *entry) {
	c.lru.Remove(e.elem)
	delete(c.entries, e.key)
}

// Stats returns the counters since New.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Keys = len(c.entries)
	return s
}

// Close wakes every waiting Get with ErrClosed, drops every entry, and ends
// the session with the leader cleanly, which releases the session's leases
// (writes of those keys then wait for nobody); it waits up to a second for
// the leader to take the release. Later Gets return ErrClosed. It is
// idempotent and always returns nil.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for _, cl := range c.calls {
		c.finishLocked(cl, ErrClosed)
	}
	c.entries = map[string]*entry{}
	c.lru.Init()
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		c.release(s)
	}
	c.cancel()
	c.wg.Wait()
	return nil
}

// releaseWait bounds how long Close waits for the leader to take the
// release; past it, the leases run out on their own.
const releaseWait = time.Second

// release ends the session cleanly, which tells the leader that this cache
// serves none of the session's leases any more: writes of those keys go
// ahead at once instead of waiting out the leases. It is sent only after
// Close has deleted every entry under c.mu, and no Get answers from memory
// once closed is set (argument B: it acknowledges every lease at once). A
// crash or a broken connection ends the stream with an error instead, and
// the leader waits the leases out. Entries of earlier sessions were
// granted to holders the leader already counts as gone; those leases run
// out on their own.
func (c *Cache) release(s *session) {
	s.sendMu.Lock()
	err := s.stream.CloseSend()
	s.sendMu.Unlock()
	if err != nil {
		return
	}
	t := time.NewTimer(releaseWait)
	defer t.Stop()
	select {
	case <-s.ended:
	case <-t.C:
	}
}

func getRequest(cl *call) *cachepb.SessionRequest {
	return &cachepb.SessionRequest{Msg: &cachepb.SessionRequest_Get{
		Get: &cachepb.GetRequest{Id: cl.id, Key: []byte(cl.key), Hits: cl.hits},
	}}
}

// toKV converts the leader's KeyValue, which has mvccpb.KeyValue's fields.
func toKV(kv *cachepb.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	return &mvccpb.KeyValue{
		Key:            kv.Key,
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		Version:        kv.Version,
		Value:          kv.Value,
		Lease:          kv.Lease,
	}
}

// leaseDuration converts lease_ms, capped where time.Duration would
// overflow (a lease that long is a broken leader; the cap only keeps the
// arithmetic sound).
func leaseDuration(ms int64) time.Duration {
	const maxMs = math.MaxInt64 / int64(time.Millisecond)
	if ms <= 0 {
		return 0
	}
	return time.Duration(min(ms, maxMs)) * time.Millisecond
}

// statusError is the leader's verdict on one request, passed through as
// the gRPC status it sent, so callers handle it as they would clientv3's.
func statusError(code uint32, msg string) error {
	return status.Error(codes.Code(code), msg)
}

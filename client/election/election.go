package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leadership is a won election or a held lock. It ends once, for good: at
// the holder's deadline, when the lease or key is known gone, or at Resign;
// Leading, Done and Context all change at that one instant. To lead again,
// campaign again.
//
// All methods are safe for concurrent use.
type Leadership struct {
	cli *clientv3.Client
	k   *keeper
	key string
	rev int64
}

// Campaign blocks until this holder leads the election prefix, with the
// keys and ordering of concurrency.Election: the holder puts prefix/<lease
// in hex> = value under its own lease and leads once every key of the prefix
// created before its own is gone. So it takes turns with
// concurrency.Election campaigners on the same prefix, and `etcdctl elect -l
// prefix` observes it.
//
// Campaign grants a fresh lease for each call (WithTTL) and keeps it alive.
// If ctx ends first, the lease is revoked and ctx's error returned; if the
// lease is lost while waiting (the holder's deadline passes, or the key is
// deleted), Campaign revokes it and returns an error wrapping the reason
// (ErrExpired, ErrLeaseGone, ErrKeyDeleted).
func Campaign(ctx context.Context, cli *clientv3.Client, prefix, value string, opts ...Option) (*Leadership, error) {
	return acquire(ctx, cli, prefix+"/", value, opts)
}

// Lock blocks until this holder holds the lock name, with the keys and
// ordering of concurrency.Mutex (name/<lease in hex>, the oldest key holds
// the lock), so it excludes concurrency.Mutex and `etcdctl lock name`
// holders. The returned Leadership has the same Leading/Done/token contract
// as a won election; Resign releases the lock.
func Lock(ctx context.Context, cli *clientv3.Client, name string, opts ...Option) (*Leadership, error) {
	return acquire(ctx, cli, name+"/", "", opts)
}

func acquire(ctx context.Context, cli *clientv3.Client, pfx, value string, opts []Option) (*Leadership, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	k, err := grant(ctx, cli.Lease, cfg)
	if err != nil {
		return nil, err
	}
	l := &Leadership{cli: cli, k: k, key: fmt.Sprintf("%s%x", pfx, int64(k.id))}
	giveUp := func(err error) (*Leadership, error) {
		k.end(ErrResigned)
		rctx, cancel := context.WithTimeout(context.Background(), cfg.ttl)
		defer cancel()
		return nil, errors.Join(err, k.revoke(rctx))
	}
	// The lease is new, so the key cannot exist; the compare only keeps the
	// request the same as concurrency's campaigners send.
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", 0)).
		Then(clientv3.OpPut(l.key, value, clientv3.WithLease(k.id))).
		Commit()
	if err != nil {
		return giveUp(fmt.Errorf("election: put %s: %w", l.key, err))
	}
	if !resp.Succeeded {
		return giveUp(fmt.Errorf("election: %s exists under a lease just granted", l.key))
	}
	l.rev = resp.Header.Revision
	go l.watchKey()

	// Waiting for predecessors ends early if this holder's own lease is lost.
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(k.ctx, cancel)
	err = waitDeletes(wctx, cli, pfx, l.rev-1)
	stop()
	cancel()
	switch {
	case k.ctx.Err() != nil:
		return giveUp(fmt.Errorf("election: lost %s while waiting for predecessors: %w", l.key, context.Cause(k.ctx)))
	case err != nil:
		return giveUp(fmt.Errorf("election: wait for predecessors of %s: %w", l.key, err))
	case !k.valid():
		return giveUp(fmt.Errorf("election: lost %s as it won: %w", l.key, context.Cause(k.ctx)))
	}
	return l, nil
}

// waitDeletes returns once no key of pfx with a create revision up to maxRev
// is left, waiting on the newest such key each time (as concurrency does, so
// a holder wakes only when its direct predecessor goes).
func waitDeletes(ctx context.Context, cli *clientv3.Client, pfx string, maxRev int64) error {
	for {
		resp, err := cli.Get(ctx, pfx, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(maxRev))...)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		if err := waitDelete(ctx, cli, string(resp.Kvs[0].Key), resp.Header.Revision+1); err != nil {
			return err
		}
	}
}

// waitDelete returns once key is deleted at or after revision from.
func waitDelete(ctx context.Context, cli *clientv3.Client, key string, from int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range cli.Watch(wctx, key, clientv3.WithRev(from), clientv3.WithFilterPut()) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", key, err)
		}
		if len(wr.Events) > 0 {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("watch %s closed", key)
}

// watchKey ends the leadership as soon as the key is deleted, by anyone:
// then the lease may live on, but the leadership it stood for is gone.
func (l *Leadership) watchKey() {
	from := l.rev + 1
	for l.k.ctx.Err() == nil {
		err := waitDelete(l.k.ctx, l.cli, l.key, from)
		if err == nil {
			l.k.end(ErrKeyDeleted)
			return
		}
		if l.k.ctx.Err() != nil {
			return
		}
		// The watch failed (compacted past from, or the client is closing):
		// read the key to learn whether it is still this holder's.
		resp, gerr := l.cli.Get(l.k.ctx, l.key)
		switch {
		case gerr != nil:
			l.k.cfg.log.Warn("election: watch of the election key failed", "key", l.key, "err", errors.Join(err, gerr))
			if l.cli.Ctx().Err() != nil || !l.k.sleepUntil(l.k.cfg.clock.Now().Add(l.k.cfg.ttl/20)) {
				return
			}
		case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev:
			l.k.end(ErrKeyDeleted)
			return
		default:
			from = resp.Header.Revision + 1
		}
	}
}

// Leading reports whether this holder may act as leader now, and its fencing
// token. ok is false from the holder's deadline on (the send time of the last
// acknowledged keep-alive, or of the grant, plus the TTL the issuer answered,
// minus the drift margin, on this process's monotonic clock), or from the
// moment the lease or key is known gone, whichever is first; once false it
// stays false.
//
// ok promises the lease is valid at the instant of the call, not at the
// action that follows it: a pause between the two is what the token is for.
// Pass the token with every write to what the leadership protects, and have
// that refuse tokens lower than one it has seen (see Guard for writes to the
// cluster itself). The token is the election key's create revision: it grows
// with each new leader of the prefix.
func (l *Leadership) Leading() (token int64, ok bool) {
	return l.rev, l.k.valid()
}

// Done is closed at the instant Leading turns false.
func (l *Leadership) Done() <-chan struct{} { return l.k.done }

// Context is cancelled at the instant Leading turns false; context.Cause
// tells why (ErrExpired, ErrLeaseGone, ErrKeyDeleted, ErrResigned).
func (l *Leadership) Context() context.Context { return l.k.ctx }

// Deadline is the instant, on this process's clock, at which Leading turns
// false unless a keep-alive moves it on first; after Done, the last one it
// had.
func (l *Leadership) Deadline() time.Time { return l.k.currentDeadline() }

// Token is the fencing token (the key's create revision), valid or not.
func (l *Leadership) Token() int64 { return l.rev }

// Key is the holder's key under the election prefix or lock name.
func (l *Leadership) Key() string { return l.key }

// Guard compares true only while the holder's key still exists with the
// create revision of its token: a write in a Txn under this compare commits
// only if this leadership is still the one in the cluster, however long the
// holder paused after Leading said yes.
func (l *Leadership) Guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// Txn starts a transaction guarded by Guard and any further compares; add
// Then/Else and Commit. It does not fail if Leading is already false: the
// cluster's compare decides, and a response with Succeeded false means the
// guard or one of cmps did not hold (add an Else(clientv3.OpGet(l.Key())) to
// tell which).
func (l *Leadership) Txn(ctx context.Context, cmps ...clientv3.Cmp) clientv3.Txn {
	return l.cli.Txn(ctx).If(append([]clientv3.Cmp{l.Guard()}, cmps...)...)
}

// Resign ends the leadership at once (Leading turns false before anything is
// sent) and revokes the lease, which deletes the key, so the next holder
// starts without waiting out the TTL. Resigning after the leadership ended
// still releases the lease.
func (l *Leadership) Resign(ctx context.Context) error {
	l.k.end(ErrResigned)
	return l.k.revoke(ctx)
}

// Observe sends the current leader of the election prefix (the key created
// first), and every change of it, as concurrency.Election's Observe does; the
// channel is closed when ctx ends or the watch fails.
func Observe(ctx context.Context, cli *clientv3.Client, prefix string) <-chan clientv3.GetResponse {
	ch := make(chan clientv3.GetResponse)
	go observe(ctx, cli, prefix+"/", ch)
	return ch
}

func observe(ctx context.Context, cli *clientv3.Client, pfx string, ch chan<- clientv3.GetResponse) {
	defer close(ch)
	send := func(r clientv3.GetResponse) bool {
		select {
		case ch <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		resp, err := cli.Get(ctx, pfx, clientv3.WithFirstCreate()...)
		if err != nil {
			return
		}
		var leader *mvccpb.KeyValue
		rev := resp.Header.Revision
		if len(resp.Kvs) > 0 {
			leader = resp.Kvs[0]
		} else if leader, rev = firstPut(ctx, cli, pfx, rev+1); leader == nil {
			return
		}
		hdr := *resp.Header
		hdr.Revision = rev
		if !send(clientv3.GetResponse{Header: &hdr, Kvs: []*mvccpb.KeyValue{leader}}) {
			return
		}
		// Follow the leader's key: its updates (Proclaim) until its delete.
		wctx, cancel := context.WithCancel(ctx)
		deleted := false
		for wr := range cli.Watch(wctx, string(leader.Key), clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					deleted = true
					break
				}
				h := wr.Header
				if !send(clientv3.GetResponse{Header: &h, Kvs: []*mvccpb.KeyValue{ev.Kv}}) {
					cancel()
					return
				}
			}
			if deleted {
				break
			}
		}
		cancel()
		if !deleted {
			return
		}
	}
}

// firstPut waits for the first key put under pfx from revision from; nil
// when ctx ends or the watch fails.
func firstPut(ctx context.Context, cli *clientv3.Client, pfx string, from int64) (*mvccpb.KeyValue, int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithFilterDelete()) {
		if wr.Err() != nil {
			return nil, 0
		}
		if len(wr.Events) > 0 {
			return wr.Events[0].Kv, wr.Events[0].Kv.ModRevision
		}
	}
	return nil, 0
}

package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Why a leadership ended: the cause of its Context (context.Cause).
var (
	// ErrExpired: the holder's own deadline passed before a keep-alive
	// extended it (a pause, a partition, an unreachable cluster).
	ErrExpired = errors.New("election: lease deadline passed on the holder's clock")
	// ErrLeaseGone: the issuer answered that the lease does not exist.
	ErrLeaseGone = errors.New("election: the lease is gone")
	// ErrKeyDeleted: the election or lock key was deleted.
	ErrKeyDeleted = errors.New("election: the election key was deleted")
	// ErrResigned: Resign was called.
	ErrResigned = errors.New("election: resigned")
)

// keeper holds one lease on the holder's side: it renews it and decides, on
// the holder's clock, until when the holder may rely on it.
//
// The deadline is the send time of the last acknowledged keep-alive (or of
// the grant) plus the TTL the issuer answered, minus the drift margin. The
// issuer starts the TTL when it processes the request, which is after it was
// sent, so up to clock rate drift the issuer's deadline is never before the
// holder's. clientv3's KeepAlive channel hides when each keep-alive was
// sent, so the keeper renews with KeepAliveOnce, reading the clock just
// before each call: if the call retries internally, every actual send is
// later than that reading, which errs on the safe side. One short-lived
// stream per renewal, every TTL/3, costs nothing that matters.
//
// The leadership ends, once and for good, at the first of: the deadline
// (ErrExpired), an answer that the lease is gone (ErrLeaseGone), end being
// called (key deleted, Resign). A keep-alive answered after the deadline
// does not revive it: the issuer may already have given the lease's keys
// to someone else.
//
// All methods are safe for concurrent use.
type keeper struct {
	cfg   config
	lease clientv3.Lease
	id    clientv3.LeaseID

	// ctx is cancelled, with the reason as its cause, when the leadership
	// ends; it bounds the keeper's RPCs and goroutines.
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu       sync.Mutex
	deadline time.Time // valid strictly before this instant
	timer    Stopper   // calls expire at deadline
	ended    bool

	revokeOnce sync.Once
	revokeErr  error
}

// grant asks for a lease and starts keeping it alive.
func grant(ctx context.Context, lease clientv3.Lease, cfg config) (*keeper, error) {
	send := cfg.clock.Now()
	resp, err := lease.Grant(ctx, int64(cfg.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("election: grant a %v lease: %w", cfg.ttl, err)
	}
	if resp.TTL <= 0 {
		return nil, fmt.Errorf("election: grant answered TTL %d", resp.TTL)
	}
	k := &keeper{cfg: cfg, lease: lease, id: resp.ID, done: make(chan struct{})}
	k.ctx, k.cancel = context.WithCancelCause(context.Background())
	ttl := time.Duration(resp.TTL) * time.Second
	k.mu.Lock()
	k.deadline = send.Add(ttl - cfg.marginFor(ttl))
	if cfg.clock.Now().Before(k.deadline) {
		k.timer = cfg.clock.At(k.deadline, k.expire)
	} else {
		k.endLocked(ErrExpired)
	}
	ended := k.ended
	k.mu.Unlock()
	if ended {
		_ = k.revoke(ctx)
		return nil, fmt.Errorf("election: lease %x granted too late to use: %w", resp.ID, ErrExpired)
	}
	go k.renew(send, ttl)
	return k, nil
}

// valid reports whether the lease may be relied on now; when it may not, the
// leadership ends at once, so valid and done never disagree.
func (k *keeper) valid() bool {
	k.mu.Lock()
	if k.ended {
		k.mu.Unlock()
		return false
	}
	if k.cfg.clock.Now().Before(k.deadline) {
		k.mu.Unlock()
		return true
	}
	k.endLocked(ErrExpired)
	k.mu.Unlock()
	k.revokeLater()
	return false
}

func (k *keeper) currentDeadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

// expire runs when the deadline timer fires.
func (k *keeper) expire() {
	k.mu.Lock()
	if k.ended || k.cfg.clock.Now().Before(k.deadline) {
		// Extended after this timer was due and before Stop could stop it:
		// the extension set a new timer.
		k.mu.Unlock()
		return
	}
	k.endLocked(ErrExpired)
	k.mu.Unlock()
	k.revokeLater()
}

// extend applies a keep-alive sent at send and answered with ttl.
func (k *keeper) extend(send time.Time, ttl time.Duration) {
	k.mu.Lock()
	if k.ended {
		k.mu.Unlock()
		return
	}
	if !k.cfg.clock.Now().Before(k.deadline) {
		k.endLocked(ErrExpired)
		k.mu.Unlock()
		k.revokeLater()
		return
	}
	// A later keep-alive cannot shorten the issuer's promise, so a smaller
	// answer never moves the deadline back.
	d := send.Add(ttl - k.cfg.marginFor(ttl))
	moved := d.After(k.deadline)
	if moved {
		k.deadline = d
		k.timer.Stop()
		k.timer = k.cfg.clock.At(d, k.expire)
	}
	k.mu.Unlock()
	if moved {
		// Only renew calls extend, so calls to onRenew never overlap.
		k.cfg.onRenew(d)
	}
}

// end ends the leadership for cause (no-op when it has ended) and, unless the
// caller releases the lease itself, revokes it in the background so that a
// successor need not wait for the issuer to expire it.
func (k *keeper) end(cause error) {
	k.mu.Lock()
	first := !k.ended
	k.endLocked(cause)
	k.mu.Unlock()
	if first && cause != ErrResigned {
		k.revokeLater()
	}
}

func (k *keeper) endLocked(cause error) {
	if k.ended {
		return
	}
	k.ended = true
	if k.timer != nil {
		k.timer.Stop()
	}
	k.cancel(cause)
	close(k.done)
	k.cfg.log.Info("election: leadership ended", "lease", fmt.Sprintf("%x", int64(k.id)), "reason", cause.Error())
}

// revokeLater revokes the lease without making the caller wait: the holder
// has stopped relying on it, so releasing it early is safe, and it saves the
// successor up to a TTL.
func (k *keeper) revokeLater() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), k.cfg.ttl)
		defer cancel()
		if err := k.revoke(ctx); err != nil {
			k.cfg.log.Warn("election: revoke the lease after leadership ended", "lease", fmt.Sprintf("%x", int64(k.id)), "err", err)
		}
	}()
}

// revoke releases the lease (and with it the key) once; a lease already gone
// is not an error.
func (k *keeper) revoke(ctx context.Context) error {
	k.revokeOnce.Do(func() {
		_, err := k.lease.Revoke(ctx, k.id)
		if err != nil && !leaseGone(err) {
			k.revokeErr = fmt.Errorf("election: revoke lease %x: %w", int64(k.id), err)
		}
	})
	return k.revokeErr
}

// renew keeps the lease alive until the leadership ends: a keep-alive TTL/3
// after the last acknowledged one was sent, and after a failure another one
// every TTL/20, so that a holder whose cluster is reachable never gets near
// its deadline (two thirds of a TTL minus the margin leave room for many
// tries across a leader change of the cluster).
func (k *keeper) renew(last time.Time, ttl time.Duration) {
	due := last.Add(ttl / 3)
	for {
		if !k.sleepUntil(due) {
			return
		}
		send := k.cfg.clock.Now()
		actx, cancel := context.WithCancel(k.ctx)
		// An attempt stuck on an unresponsive member must not use up the
		// time left for the next one.
		t := k.cfg.clock.At(send.Add(ttl/3), cancel)
		resp, err := k.lease.KeepAliveOnce(actx, k.id)
		t.Stop()
		cancel()
		switch {
		case err == nil:
			ttl = time.Duration(resp.TTL) * time.Second
			k.extend(send, ttl)
			due = send.Add(ttl / 3)
		case leaseGone(err):
			k.end(ErrLeaseGone)
			k.cfg.renewed(err)
			return
		case k.ctx.Err() != nil:
			return
		default:
			k.cfg.log.Warn("election: keep-alive failed, retrying", "lease", fmt.Sprintf("%x", int64(k.id)), "err", err)
			due = k.cfg.clock.Now().Add(ttl / 20)
		}
		k.cfg.renewed(err)
	}
}

// sleepUntil waits for the clock to reach t; false when the leadership
// ended first.
func (k *keeper) sleepUntil(t time.Time) bool {
	wake := make(chan struct{})
	timer := k.cfg.clock.At(t, func() { close(wake) })
	select {
	case <-wake:
		return true
	case <-k.done:
		timer.Stop()
		return false
	}
}

// leaseGone reports whether err says the lease does not exist: the issuer
// answered NotFound, or a keep-alive answered TTL <= 0 (which clientv3
// reports as the same error).
func leaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || rpctypes.Error(err) == rpctypes.ErrLeaseNotFound
}

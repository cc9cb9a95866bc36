package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// LeaseConfig shapes the lease workers.
type LeaseConfig struct {
	MinTTL, MaxTTL int64         // seconds, requested at grant
	MaxKeepAlive   time.Duration // how long a holder keeps a lease alive at most
	RevokeProb     float64       // chance a holder revokes instead of letting go
	// ObserveFor bounds how long after its last keep-alive a lease is
	// polled for; well past TTL + every bound the checker allows.
	ObserveFor time.Duration
}

// Leases runs lease holders: grant, attach a key, keep alive a while with
// KeepAliveOnce, then stop (or revoke) and watch the lease go.
type Leases struct {
	env *Env
	cfg LeaseConfig
}

// NewLeases makes the lease workload.
func NewLeases(e *Env, cfg LeaseConfig) *Leases { return &Leases{env: e, cfg: cfg} }

// Run holds one lease after another until ctx is done or finish is closed;
// after finish it stops renewing at once and observes the last lease until
// it is gone (bounded by ObserveFor), so the run ends with every lease
// resolved.
func (l *Leases) Run(ctx context.Context, finish <-chan struct{}, seed uint64) {
	e := l.env
	process := e.NewProcess()
	cli, member := e.client(process)
	rng := newRand(seed, process)
	for n := 0; ctx.Err() == nil; n++ {
		select {
		case <-finish:
			return
		default:
		}
		h := &holder{l: l, cli: cli, process: process, member: member,
			key: fmt.Sprintf("%s%03d/%05d", LeasePrefix, process, n)}
		ttl := l.cfg.MinTTL + rng.Int64N(l.cfg.MaxTTL-l.cfg.MinTTL+1)
		if !h.grant(ctx, ttl) {
			if !sleep(ctx, 300*time.Millisecond) {
				return
			}
			continue
		}
		h.put(ctx)
		// Renewing faster than --lease-checkpoint-after never checkpoints
		// the lease; renewing slower makes every keep-alive reset a
		// checkpoint first. Both paths are the ones leader changes hit.
		var every time.Duration
		if rng.IntN(2) == 0 {
			every = time.Duration(200+rng.IntN(500)) * time.Millisecond
		} else {
			every = time.Duration(1100+rng.Int64N(max(1, ttl*1000*45/100-1100))) * time.Millisecond
		}
		hold := time.Duration(rng.Int64N(int64(l.cfg.MaxKeepAlive)))
		until := time.Now().Add(hold)
		dead := false
	renew:
		for time.Now().Before(until) {
			select {
			case <-finish:
				break renew
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
			if h.keepAlive(ctx) == errGone {
				dead = true
				break
			}
		}
		if !dead && rng.Float64() < l.cfg.RevokeProb {
			h.revoke(ctx)
		}
		h.observe(ctx)
	}
}

var errGone = errors.New("lease gone")

type holder struct {
	l       *Leases
	cli     *clientv3.Client
	process int
	member  int
	key     string
	id      clientv3.LeaseID
	ttl     int64
}

func (h *holder) op(kind string) history.Op {
	return history.Op{Process: h.process, Member: h.member, Kind: kind, Key: h.key, Lease: int64(h.id)}
}

func (h *holder) grant(ctx context.Context, ttl int64) bool {
	e := h.l.env
	octx, cancel := e.opCtx(ctx)
	defer cancel()
	op := h.op(history.KindGrant)
	op.Expect = fmt.Sprint(ttl)
	op.Start = e.Clock.Now()
	resp, err := h.cli.Grant(octx, ttl)
	op.End = e.Clock.Now()
	op.Result, op.Error = writeResult(err), errString(err)
	if err == nil {
		h.id, h.ttl = resp.ID, resp.TTL
		op.Lease, op.TTL = int64(resp.ID), resp.TTL
	}
	e.Rec.Add(op)
	return err == nil
}

func (h *holder) put(ctx context.Context) {
	e := h.l.env
	octx, cancel := e.opCtx(ctx)
	defer cancel()
	op := h.op(history.KindLeasePut)
	op.Value = e.value()
	op.Start = e.Clock.Now()
	resp, err := h.cli.Put(octx, h.key, op.Value, clientv3.WithLease(h.id))
	op.End = e.Clock.Now()
	op.Result, op.Error = writeResult(err), errString(err)
	if err == nil {
		op.Rev = resp.Header.Revision
	}
	e.Rec.Add(op)
}

// keepAlive records one KeepAliveOnce; Start is when the request was sent,
// which is all the never-early check may assume about when the leader
// renewed it.
func (h *holder) keepAlive(ctx context.Context) error {
	e := h.l.env
	octx, cancel := e.opCtx(ctx)
	defer cancel()
	op := h.op(history.KindKeep)
	op.Start = e.Clock.Now()
	resp, err := h.cli.KeepAliveOnce(octx, h.id)
	op.End = e.Clock.Now()
	op.Error = errString(err)
	switch {
	case err == nil:
		op.Result, op.TTL = history.OK, resp.TTL
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// An answer, not a lost request: the leader has no such lease.
		op.Result, op.TTL = history.Fail, -1
		err = errGone
	default:
		op.Result = history.Unknown
	}
	e.Rec.Add(op)
	return err
}

func (h *holder) revoke(ctx context.Context) {
	e := h.l.env
	octx, cancel := e.opCtx(ctx)
	defer cancel()
	op := h.op(history.KindRevoke)
	op.Start = e.Clock.Now()
	_, err := h.cli.Revoke(octx, h.id)
	op.End = e.Clock.Now()
	op.Result, op.Error = writeResult(err), errString(err)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		op.Result = history.Fail
	}
	e.Rec.Add(op)
}

// observe polls TimeToLive and the attached key until both say the lease is
// gone, then sends one more keep-alive, which must not bring it back. It
// never renews before that, so the lease's fate is the server's alone.
// It keeps going after ctx is done (the run is winding down and wants every
// lease resolved), bounded by ObserveFor.
func (h *holder) observe(ctx context.Context) {
	e := h.l.env
	stop := time.Now().Add(h.l.cfg.ObserveFor)
	octxBase := context.WithoutCancel(ctx)
	for time.Now().Before(stop) {
		ttlGone := h.timeToLive(octxBase)
		keyGone := h.getKey(octxBase)
		if ttlGone && keyGone {
			h.keepAlive(octxBase)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.Log.Warn("lease still alive when observation ended", "lease", fmt.Sprintf("%x", int64(h.id)), "key", h.key)
}

// timeToLive records one TimeToLive; true when the answer is "no such lease".
func (h *holder) timeToLive(ctx context.Context) bool {
	e := h.l.env
	octx, cancel := e.opCtx(ctx)
	defer cancel()
	op := h.op(history.KindTTL)
	op.Start = e.Clock.Now()
	resp, err := h.cli.TimeToLive(octx, h.id)
	op.End = e.Clock.Now()
	op.Result, op.Error = readResult(err), errString(err)
	if err == nil {
		op.TTL = resp.TTL
	}
	e.Rec.Add(op)
	return err == nil && resp.TTL == -1
}

// getKey records a linearizable read of the lease's key; true when absent.
func (h *holder) getKey(ctx context.Context) bool {
	e := h.l.env
	octx, cancel := e.opCtx(ctx)
	defer cancel()
	op := h.op(history.KindLeaseGet)
	op.Start = e.Clock.Now()
	resp, err := h.cli.Get(octx, h.key)
	op.End = e.Clock.Now()
	op.Result, op.Error = readResult(err), errString(err)
	if err == nil && len(resp.Kvs) > 0 {
		op.Found, op.Value, op.Rev = true, string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
		op.Detail = fmt.Sprintf("lease %x", resp.Kvs[0].Lease)
	}
	e.Rec.Add(op)
	return err == nil && len(resp.Kvs) == 0
}

package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// keyPool hands out register keys and retires each after a number of ops or
// of indeterminate ops: the linearizability search is exponential in the
// ops that never returned, and a key's history is checked on its own.
type keyPool struct {
	prefix     string // key names: prefix + a number
	mu         sync.Mutex
	active     []*regKey
	gen        int
	maxOps     int
	maxUnknown int
}

type regKey struct {
	name    string
	ops     int
	unknown int
	retired bool
}

func newKeyPool(prefix string, n, maxOps, maxUnknown int) *keyPool {
	p := &keyPool{prefix: prefix, maxOps: maxOps, maxUnknown: maxUnknown}
	for range n {
		p.active = append(p.active, p.fresh())
	}
	return p
}

func (p *keyPool) fresh() *regKey {
	p.gen++
	return &regKey{name: fmt.Sprintf("%s%04d", p.prefix, p.gen)}
}

func (p *keyPool) pick(rng *rand.Rand) *regKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.active[rng.IntN(len(p.active))]
	k.ops++
	return k
}

func (p *keyPool) done(k *regKey, r history.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r == history.Unknown {
		k.unknown++
	}
	if k.retired || (k.ops < p.maxOps && k.unknown < p.maxUnknown) {
		return
	}
	k.retired = true
	for i, a := range p.active {
		if a == k {
			p.active[i] = p.fresh()
		}
	}
}

// Register runs get / put / compare-and-set workers over a few keys.
type Register struct {
	env  *Env
	pool *keyPool
}

// NewRegister makes the register workload over `keys` keys at a time.
func NewRegister(env *Env, keys int) *Register {
	return &Register{env: env, pool: newKeyPool(RegPrefix, keys, 250, 6)}
}

type seen struct {
	value string
	rev   int64
}

// Run is one register client until ctx is done.
func (r *Register) Run(ctx context.Context, seed uint64) {
	e := r.env
	process := e.NewProcess()
	cli, member := e.client(process)
	rng := newRand(seed, process)
	last := map[string]seen{}
	for ctx.Err() == nil {
		k := r.pool.pick(rng)
		s, known := last[k.name]
		op := history.Op{Process: process, Member: member, Key: k.name}
		x := rng.Float64()
		switch {
		case x < 0.35 || !known:
			op.Kind = history.KindGet
		case x < 0.6:
			op.Kind = history.KindPut
		case x < 0.8 && s.value != "":
			op.Kind = history.KindCASValue
		default:
			op.Kind = history.KindCASRev
		}
		r.do(ctx, cli, &op, s)
		if op.Result == history.OK {
			switch {
			case op.Kind == history.KindGet:
				last[k.name] = seen{op.Value, op.Rev}
			case op.Kind == history.KindPut || op.Swapped:
				last[k.name] = seen{op.Value, op.Rev}
			default:
				last[k.name] = seen{op.Read, op.ReadRev}
			}
		}
		r.pool.done(k, op.Result)
		e.Rec.Add(op)
		if !sleep(ctx, time.Duration(rng.IntN(15))*time.Millisecond) {
			return
		}
	}
}

func (r *Register) do(ctx context.Context, cli *clientv3.Client, op *history.Op, s seen) {
	e := r.env
	ctx, cancel := e.opCtx(ctx)
	defer cancel()
	switch op.Kind {
	case history.KindGet:
		op.Start = e.Clock.Now()
		resp, err := cli.Get(ctx, op.Key)
		op.End = e.Clock.Now()
		op.Result, op.Error = readResult(err), errString(err)
		if err == nil && len(resp.Kvs) > 0 {
			op.Value, op.Rev = string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
		}
	case history.KindPut:
		op.Value = e.value()
		op.Start = e.Clock.Now()
		resp, err := cli.Put(ctx, op.Key, op.Value)
		op.End = e.Clock.Now()
		op.Result, op.Error = writeResult(err), errString(err)
		if err == nil {
			op.Rev = resp.Header.Revision
		}
	case history.KindCASValue, history.KindCASRev:
		op.Value = e.value()
		var cmp clientv3.Cmp
		if op.Kind == history.KindCASValue {
			op.Expect = s.value
			cmp = clientv3.Compare(clientv3.Value(op.Key), "=", s.value)
		} else {
			op.ExpectRev = s.rev
			cmp = clientv3.Compare(clientv3.ModRevision(op.Key), "=", s.rev)
		}
		op.Start = e.Clock.Now()
		resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(op.Key, op.Value)).Else(clientv3.OpGet(op.Key)).Commit()
		op.End = e.Clock.Now()
		op.Result, op.Error = writeResult(err), errString(err)
		if err != nil {
			return
		}
		op.Swapped = resp.Succeeded
		if resp.Succeeded {
			op.Rev = resp.Header.Revision
			return
		}
		// The else branch tells what the compare saw, which the model
		// checks like a read: a failed CAS is an observation too.
		if len(resp.Responses) == 1 {
			if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
				op.Read, op.ReadRev, op.Found = string(rr.Kvs[0].Value), rr.Kvs[0].ModRevision, true
			}
		}
	}
}

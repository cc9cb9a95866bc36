package workload

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// RunSet adds unique keys under SetPrefix until ctx is done; every
// acknowledged one must be there at the end.
func RunSet(ctx context.Context, e *Env, seed uint64) {
	process := e.NewProcess()
	cli, member := e.client(process)
	rng := newRand(seed, process)
	for n := 0; ctx.Err() == nil; n++ {
		op := history.Op{Process: process, Member: member, Kind: history.KindAdd,
			Key: fmt.Sprintf("%s%03d/%06d", SetPrefix, process, n), Value: e.value()}
		octx, cancel := e.opCtx(ctx)
		op.Start = e.Clock.Now()
		resp, err := cli.Put(octx, op.Key, op.Value)
		op.End = e.Clock.Now()
		cancel()
		op.Result, op.Error = writeResult(err), errString(err)
		if err == nil {
			op.Rev = resp.Header.Revision
		}
		e.Rec.Add(op)
		if !sleep(ctx, time.Duration(10+rng.IntN(30))*time.Millisecond) {
			return
		}
	}
}

// FinalRead reads prefix through every member (linearizable) and records
// what each returned.
func FinalRead(ctx context.Context, e *Env, prefix string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(e.Pinned))
	for i, cli := range e.Pinned {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = finalRead(ctx, e, cli, i, prefix)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func finalRead(ctx context.Context, e *Env, cli *clientv3.Client, member int, prefix string) error {
	var last error
	// A member just restarted may need a moment; the read is retried
	// because a final read that never happened would hide lost writes.
	for range 10 {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		op := history.Op{Process: 0, Member: member, Kind: history.KindRead, Key: prefix}
		op.Start = e.Clock.Now()
		resp, err := cli.Get(octx, prefix, clientv3.WithPrefix())
		op.End = e.Clock.Now()
		cancel()
		op.Result, op.Error = readResult(err), errString(err)
		if err == nil {
			op.Rev = resp.Header.Revision
			for _, kv := range resp.Kvs {
				op.Keys = append(op.Keys, string(kv.Key))
				op.Values = append(op.Values, string(kv.Value))
			}
		}
		e.Rec.Add(op)
		if err == nil {
			return nil
		}
		last = err
		if !sleep(ctx, time.Second) {
			break
		}
	}
	return fmt.Errorf("workload: final read of %s through member %d: %w", prefix, member, last)
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// setupFollowerRead measures how soon a follower serves a write the leader
// has just acknowledged: one writer puts a key through the leader, then
// reads it through a follower, linearizably (one read, which must hold the
// write) or serializably (read again until it does). Only the read is
// timed, from the put's acknowledgement. Writes are spaced out, so the
// leader is idle between them: the case where a follower learns of a
// commit only from the leader's next append.
func setupFollowerRead(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	key := fs.String("key", "/corebench/follower-read", "key written through the leader and read through a follower")
	consistency := fs.String("consistency", "l", "l: one linearizable read, which must return the write; s: serializable reads until one returns it")
	total := fs.Int64("total", 500, "writes, each followed by its read")
	interval := fs.Duration("put-interval", 10*time.Millisecond, "pause between a read and the next put")
	return func(ctx context.Context, c *common) (*Result, error) {
		var opts []clientv3.OpOption
		switch *consistency {
		case "l":
		case "s":
			opts = append(opts, clientv3.WithSerializable())
		default:
			return nil, fmt.Errorf("--consistency %q: want l or s", *consistency)
		}
		if len(c.endpoints) < 2 {
			return nil, errors.New("needs the endpoints of a leader and a follower")
		}
		leader, err := findLeader(ctx, c, c.endpoints)
		if err != nil {
			return nil, err
		}
		follower := c.endpoints[0]
		if follower == leader.endpoint {
			follower = c.endpoints[1]
		}
		w, err := newClient(c, leader.endpoint)
		if err != nil {
			return nil, err
		}
		defer w.Close()
		r, err := newClient(c, follower)
		if err != nil {
			return nil, err
		}
		defer r.Close()

		name := "follower-read-" + *consistency
		var rec recorder
		prog := startProgress(name, *total, &rec.done, &rec.failed)
		began := time.Now()
		var lats []time.Duration
		for i := int64(1); i <= *total && ctx.Err() == nil; i++ {
			if err := sleepCtx(ctx, *interval); err != nil {
				break
			}
			want := strconv.FormatInt(i, 10)
			if _, err := w.Put(ctx, *key, want); err != nil {
				rec.fail(err)
				rec.done.Add(1)
				continue
			}
			t := time.Now()
			for {
				resp, err := r.Get(ctx, *key, opts...)
				if err != nil {
					rec.fail(err)
					break
				}
				if len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == want {
					lats = append(lats, time.Since(t))
					break
				}
				if *consistency == "l" {
					rec.fail(fmt.Errorf("linearizable read on %s missed the write acknowledged before it", follower))
					break
				}
			}
			rec.done.Add(1)
		}
		prog.stop()
		rec.merge(lats)
		return opsResult(ctx, name, *total, rec.stats(time.Since(began)))
	}
}

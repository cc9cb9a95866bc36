package member_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// TestAutoCompaction runs etcd's two modes on a cluster: the leader
// compacts by itself, keeping what was asked.
func TestAutoCompaction(t *testing.T) {
	for name, ac := range map[string]member.AutoCompaction{
		"revision": {Revisions: 3, RevisionEvery: 50 * time.Millisecond},
		"periodic": {Periodic: 300 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.AutoCompaction = ac }))
			leader := c.WaitLeader()
			cli := c.Client(leader)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var last int64
			for i := range 10 {
				r, err := cli.Put(ctx, "k", fmt.Sprint(i))
				if err != nil {
					t.Fatal(err)
				}
				last = r.Header.Revision
			}
			// Compacted up to somewhere past the first writes, never
			// within the last three revisions (revision mode).
			for {
				_, err := cli.Get(ctx, "k", clientv3.WithRev(2))
				if errors.Is(err, rpctypes.ErrCompacted) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if ctx.Err() != nil {
					t.Fatal("never compacted")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if name == "revision" {
				if _, err := cli.Get(ctx, "k", clientv3.WithRev(last-2)); err != nil {
					t.Errorf("revision %d of %d compacted, keeping 3: %v", last-2, last, err)
				}
			}
		})
	}
}

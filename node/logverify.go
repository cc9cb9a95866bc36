package node

import (
	"context"
	"time"
)

// DefaultLogVerifyInterval is how often the leader appends a checkpoint
// when Config.LogVerifyInterval is zero (Consul's default is a minute; a
// checkpoint is one small entry, and the follower reads back at most what
// was written since the last one).
const DefaultLogVerifyInterval = 30 * time.Second

// checkpointer is the leader service that appends a log verification
// checkpoint, a raft barrier, every interval while this member leads: the
// leader's half of log verification, whose store stamps the barrier with
// the sum of the entries before it (package logstore, "Verification").
type checkpointer struct {
	n *Node
}

func (c checkpointer) Run(ctx context.Context, _ uint64) {
	t := time.NewTicker(c.n.cfg.LogVerifyInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The barrier returns once applied; its error is a lost
		// leadership or a shutdown, and ctx says which soon enough.
		if err := await(ctx, c.n.raft.Barrier(c.n.cfg.ElectionTimeout*5)); err != nil && ctx.Err() == nil {
			c.n.log.Debug("log verification checkpoint not appended", "err", err)
		}
	}
}

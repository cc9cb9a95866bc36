// The proposal path: every change to replicated state is a command that
// passes the leader's Gate, then raft, then the FSM, and Propose returns
// the FSM's answer once this member has applied it. A follower does not
// propose; its transport forwards the client's request to the leader.

package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/logstore"
)

// Gate holds a leader's commands back until they may change state. The
// read-lease manager is one: a write to a key under read leases waits until
// no holder can still serve the old value.
//
// Admit is called on the leader for every command, from any number of
// goroutines at once, before the command is handed to raft. It gets the
// command decoded: the leader's own proposals as their proposer made them,
// a forwarded one decoded once on its way in, so the gate never decodes
// the entry. It returns once the command may be proposed, or with an error
// (ctx's, or one for the client) and then the command is not proposed. If
// it returns nil error, release is called exactly once: after the command
// applied on this member, or after its proposal failed (then it may still
// commit under a later leader, whose own gate admits nothing before every
// earlier promise ran out).
type Gate interface {
	Admit(ctx context.Context, cmd fsm.Command) (release func(), err error)
}

// Propose replicates one command and returns the FSM's response once the
// entry is committed on a quorum (fsynced) and applied on this member. It is
// the only way replicated state changes.
//
// A proposal cannot be withdrawn once handed to raft: if ctx ends first the
// caller stops waiting, but the command may still commit. The wait itself is
// bounded: a leader that loses its quorum steps down after the leader lease
// timeout and fails every pending future.
func (n *Node) Propose(ctx context.Context, op fsm.Op, msg fsm.Message) (any, error) {
	if n.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	cmd := fsm.Command{Op: op, Msg: msg}
	data, err := cmd.Encode()
	if err != nil {
		return nil, err
	}
	resp, _, err := n.propose(ctx, cmd, data)
	return resp, err
}

// ProposeCommand is Propose for a command its caller already encoded:
// data is cmd's log entry (cmd.Encode), handed to raft as it is, and the
// gate reads cmd, so nothing is encoded or decoded again. index is the
// command's log index once it applied here (0 if it did not).
func (n *Node) ProposeCommand(ctx context.Context, cmd fsm.Command, data []byte) (resp any, index uint64, err error) {
	if n.raft.State() != raft.Leader {
		return nil, 0, ErrNotLeader
	}
	return n.propose(ctx, cmd, data)
}

// ProposeEncoded is Propose for a command a follower already encoded and
// forwarded. The leader decodes it here, once, for the gate (the FSM
// decodes the entry again where it applies, as on every member); a command
// this member cannot decode is refused, never proposed. index is the
// command's log index once it applied here (0 if it did not): the follower
// answers its client only once it has applied that far too.
func (n *Node) ProposeEncoded(ctx context.Context, data []byte) (resp any, index uint64, err error) {
	if n.raft.State() != raft.Leader {
		return nil, 0, ErrNotLeader
	}
	cmd, err := fsm.Decode(data)
	if err != nil {
		return nil, 0, fmt.Errorf("node: forwarded command: %w", err)
	}
	return n.propose(ctx, cmd, data)
}

// AwaitApplied returns once this member has applied index: a follower
// waits for it before it answers a write it forwarded, as etcd answers a
// write only once the member serving it applied it (see ProposeEncoded).
// While this member cannot persist its raft state (StorageErr) it returns
// at once: the member applies nothing until its disk takes writes again,
// the write is on a quorum's disks regardless, and holding the client for
// a disk's repair would turn an acknowledged write into a timeout.
func (n *Node) AwaitApplied(ctx context.Context, index uint64) error {
	for {
		applied, storage := n.fsm.AppliedChanged(), n.StorageChange()
		if n.fsm.Applied() >= index || n.StorageErr() != nil {
			return nil
		}
		select {
		case <-applied:
		case <-storage:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SetGate installs the gate every proposal passes (nil: none). Set it
// before Start.
func (n *Node) SetGate(g Gate) {
	if g == nil {
		n.gate.Store(nil)
		return
	}
	n.gate.Store(&g)
}

func (n *Node) propose(ctx context.Context, cmd fsm.Command, data []byte) (any, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	op := cmd.Op
	if g := n.gate.Load(); g != nil {
		release, err := (*g).Admit(ctx, cmd)
		if err != nil {
			return nil, 0, err
		}
		// raft's future resolves only once the entry applied here or the
		// proposal failed (leadership lost, shutdown): Gate's contract.
		defer release()
	}
	start := time.Now()
	n.metrics.proposals.Inc()
	f := n.raft.Apply(data, n.cfg.ElectionTimeout)
	if err := f.Error(); err != nil {
		n.metrics.proposalsFail.Inc()
		switch {
		case errors.Is(err, raft.ErrNotLeader):
			return nil, 0, ErrNotLeader
		case errors.Is(err, logstore.ErrCannotPersist):
			// This leader could not store the entry, and raft stepped it
			// down (dispatchLogs, raft.go:1266); but early replication
			// (early.go) offered the entry to the followers before the
			// write, so one may hold it and the next leader commit it.
			// Its outcome is unknown: sent again, it could apply twice.
			return nil, 0, ErrLeaderChanged
		case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return nil, 0, ErrLeaderChanged
		case errors.Is(err, raft.ErrRaftShutdown):
			return nil, 0, ErrStopped
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return nil, 0, ErrTimeout
		}
		return nil, 0, fmt.Errorf("node: propose %s: %w", op, err)
	}
	n.metrics.applyLatency.Observe(time.Since(start).Seconds())
	res, ok := f.Response().(fsm.Result)
	if !ok {
		return nil, 0, fmt.Errorf("node: propose %s: unexpected apply result %T", op, f.Response())
	}
	return res.Resp, f.Index(), res.Err
}

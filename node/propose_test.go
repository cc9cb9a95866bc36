package node

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/logstore"
)

// TestAwaitApplied: a follower's wait before it answers a forwarded write
// ends when its FSM applies the entry, and at once while the member cannot
// persist (it would apply nothing until its disk is back).
func TestAwaitApplied(t *testing.T) {
	n := &Node{log: quiet, fsm: fsm.New(quiet, nil, nil), health: logstore.NewHealth(quiet)}
	apply := func(index uint64) { n.fsm.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogNoop}}) }
	ctx := context.Background()
	ended, cancel := context.WithCancel(ctx)
	cancel()

	if err := n.AwaitApplied(ended, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("before index 1 applied: %v, want the context's end", err)
	}
	done := make(chan error, 1)
	go func() { done <- n.AwaitApplied(ctx, 2) }()
	apply(1)
	apply(2)
	if err := <-done; err != nil {
		t.Fatalf("once index 2 applied: %v", err)
	}
	if err := n.AwaitApplied(ended, 2); err != nil {
		t.Fatalf("index 2, already applied: %v", err)
	}

	go func() { done <- n.AwaitApplied(ctx, 3) }()
	n.health.Fail("append to the raft log", errDiskFull)
	if err := <-done; err != nil {
		t.Fatalf("once the member cannot persist: %v", err)
	}
	if err := n.AwaitApplied(ended, 4); err != nil {
		t.Fatalf("while the member cannot persist: %v", err)
	}
	n.health.Clear()
	if err := n.AwaitApplied(ended, 4); !errors.Is(err, context.Canceled) {
		t.Fatalf("once the disk is back, before index 4 applied: %v, want the context's end", err)
	}
}

package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

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

// recordingGate admits everything and keeps what it was handed.
type recordingGate struct {
	mu   sync.Mutex
	cmds []fsm.Command
}

func (g *recordingGate) Admit(_ context.Context, cmd fsm.Command) (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cmds = append(g.cmds, cmd)
	return func() {}, nil
}

func (g *recordingGate) last(t *testing.T, n int) fsm.Command {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.cmds) != n {
		t.Fatalf("gate admitted %d commands, want %d", len(g.cmds), n)
	}
	return g.cmds[n-1]
}

// TestGateGetsTheDecodedCommand: the leader decodes a command once: the
// gate gets the proposer's own request (the same message, not a copy
// decoded from the entry); a forwarded entry is decoded once on its way in,
// and one that cannot be decoded is refused before the gate and raft.
func TestGateGetsTheDecodedCommand(t *testing.T) {
	nodes := startInmem(t, 1, noCheckpoints)
	waitLeader(t, nodes)
	n := nodes[0]
	g := &recordingGate{}
	n.SetGate(g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	put := &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}
	if _, err := n.Propose(ctx, fsm.OpPut, put); err != nil {
		t.Fatal(err)
	}
	if c := g.last(t, 1); c.Op != fsm.OpPut || c.Msg != fsm.Message(put) || c.As != nil {
		t.Errorf("Propose: gate got %+v, want the proposer's put", c)
	}

	as := &pb.RequestHeader{Username: "u", AuthRevision: 3}
	del := fsm.Command{Op: fsm.OpDeleteRange, Msg: &pb.DeleteRangeRequest{Key: []byte("a")}, As: as}
	data, err := del.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.ProposeCommand(ctx, del, data); err != nil {
		t.Fatal(err)
	}
	if c := g.last(t, 2); c.Op != fsm.OpDeleteRange || c.Msg != del.Msg || c.As != as {
		t.Errorf("ProposeCommand: gate got %+v, want the proposer's command", c)
	}

	fwd := fsm.Command{Op: fsm.OpPut, Msg: &pb.PutRequest{Key: []byte("b")}, As: as}
	if data, err = fwd.Encode(); err != nil {
		t.Fatal(err)
	}
	_, index, err := n.ProposeEncoded(ctx, data)
	if err != nil || index == 0 {
		t.Fatalf("ProposeEncoded: index %d, %v", index, err)
	}
	c := g.last(t, 3)
	if got, ok := c.Msg.(*pb.PutRequest); c.Op != fsm.OpPut || !ok || string(got.Key) != "b" || (c.As == nil || c.As.Username != "u") {
		t.Errorf("ProposeEncoded of an entry made as a user: gate got %+v, want the put inside, as u", c)
	}

	applied := n.fsm.Applied()
	for _, bad := range [][]byte{{1}, {1, 99}, {9, byte(fsm.OpPut)}, {1, byte(fsm.OpLeaseGrant), 0xff}} {
		if _, _, err := n.ProposeEncoded(ctx, bad); err == nil {
			t.Errorf("forwarded %x proposed", bad)
		}
	}
	g.last(t, 3)
	if n.fsm.Applied() != applied {
		t.Errorf("undecodable forwarded entries reached the log: applied %d, was %d", n.fsm.Applied(), applied)
	}
}

package node

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
)

// heldWrite holds the first write of one command to any member's log
// until another member has written it too, or until patience runs out.
type heldWrite struct {
	cmd      []byte
	patience time.Duration

	mu       sync.Mutex
	held     bool          // the first write (the leader's) is being held
	copied   chan struct{} // closed when another member wrote the command
	copiedBy bool          // the other write came while the first was held
}

func (h *heldWrite) wrap(s raft.LogStore) raft.LogStore { return heldStore{s, h} }

type heldStore struct {
	raft.LogStore
	h *heldWrite
}

func (s heldStore) StoreLogs(logs []*raft.Log) error {
	h := s.h
	for _, l := range logs {
		if l.Type != raft.LogCommand || !bytes.Equal(l.Data, h.cmd) {
			continue
		}
		h.mu.Lock()
		first := !h.held
		h.held = true
		h.mu.Unlock()
		if first {
			// Only the leader makes the entry, so the first write is its.
			select {
			case <-h.copied:
				h.mu.Lock()
				h.copiedBy = true
				h.mu.Unlock()
			case <-time.After(h.patience):
			}
			break
		}
		err := s.LogStore.StoreLogs(logs)
		h.mu.Lock()
		select {
		case <-h.copied:
		default:
			close(h.copied)
		}
		h.mu.Unlock()
		return err
	}
	return s.LogStore.StoreLogs(logs)
}

func (s heldStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// TestFollowersWriteWhileLeaderWrites: a follower stores a new entry while
// the leader's own write of it has not finished. Without early replication
// hashicorp/raft sends entries only after the leader's write returns, so
// the held write would wait out its patience and the test fails.
func TestFollowersWriteWhileLeaderWrites(t *testing.T) {
	cmd, err := fsm.Encode(fsm.OpPut, &pb.PutRequest{Key: []byte("early"), Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	h := &heldWrite{cmd: cmd, patience: 3 * time.Second, copied: make(chan struct{})}
	nodes := startInmem(t, 3, func(c *Config) { c.wrapLog = h.wrap })
	leader := nodes[waitLeader(t, nodes)]
	// Followers must have acknowledged an append in this term first: an
	// early append goes only to a follower known to hold the entry before.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	warm, err := fsm.Encode(fsm.OpPut, &pb.PutRequest{Key: []byte("warm"), Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.ProposeEncoded(ctx, warm); err != nil {
		t.Fatalf("warm-up put: %v", err)
	}
	// And be waiting for the leader: one with an append on its way (its
	// warm-up entry, a commit notice) is left to raft's replication.
	waitFollowersIdle(t, leader, nodes)

	start := time.Now()
	if _, err := leader.ProposeEncoded(ctx, cmd); err != nil {
		t.Fatalf("put: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.copiedBy {
		t.Fatalf("no follower wrote the entry while the leader's write was held (%v): it was not sent early", time.Since(start))
	}
	if n := testutil.ToFloat64(leader.metrics.earlyAppends); n == 0 {
		t.Fatal("corenode_raft_early_appends_total is 0 on the leader")
	}
	// raft's own append of the entry found it acknowledged and was
	// answered without a round trip.
	if n := testutil.ToFloat64(leader.repl.answered); n == 0 {
		t.Fatal(`corenode_raft_leader_appends_total{outcome="answered"} is 0 on the leader`)
	}
}

// waitFollowersIdle waits until every follower has acknowledged the
// leader's whole log, been told its commit index, and has no append on
// its way.
func waitFollowersIdle(t *testing.T, leader *Node, nodes []*Node) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		idle := true
		for _, n := range nodes {
			if n == leader {
				continue
			}
			match, told, inflight, _ := leader.repl.progress(ServerID(n.ID()), leader.Term())
			if match < leader.raft.LastIndex() || told < leader.raft.CommitIndex() || inflight {
				idle = false
			}
		}
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("followers did not catch up with the leader")
		}
		time.Sleep(time.Millisecond)
	}
}

package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// startInmem starts n members joined by raft's in-memory transport; opts
// adjust each member's Config.
func startInmem(t *testing.T, n int, opts ...func(*Config)) []*Node {
	t.Helper()
	var servers []raft.Server
	var trans []*raft.InmemTransport
	for i := range n {
		addr, tr := raft.NewInmemTransport("")
		trans = append(trans, tr)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: ServerID(uint64(i + 1)), Address: addr})
	}
	for _, a := range trans {
		for _, b := range trans {
			a.Connect(b.LocalAddr(), b)
		}
	}
	var nodes []*Node
	for i := range n {
		cfg := Config{
			Name: "m", DataDir: t.TempDir(), ID: uint64(i + 1), Transport: trans[i],
			Bootstrap: true, InitialMembers: servers,
			HeartbeatInterval: 20 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
			CommitNotify: time.Hour, RaftLog: discard{},
		}
		for _, o := range opts {
			o(&cfg)
		}
		nd, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nd.Start()
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
	}
	return nodes
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func waitLeader(t *testing.T, nodes []*Node) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range nodes {
			if n.IsLeader() && n.readyTerm.Load() == n.Term() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader")
	return -1
}

// TestHeartbeatProber: the leader's fresh heartbeats come back with its
// term from every follower, which confirms its leadership; a member that
// does not lead refuses to send them.
func TestHeartbeatProber(t *testing.T) {
	nodes := startInmem(t, 3)
	l := waitLeader(t, nodes)
	leader := nodes[l]
	for i, n := range nodes {
		if i == l {
			continue
		}
		term, err := heartbeatProber{leader}.Term(context.Background(), n.repl.LocalAddr())
		if err != nil {
			t.Fatalf("probe member %d: %v", i, err)
		}
		if term != leader.Term() {
			t.Fatalf("member %d answered term %d, leader's is %d", i, term, leader.Term())
		}
		if _, err := (heartbeatProber{n}).Term(context.Background(), leader.repl.LocalAddr()); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("a follower probed: %v, want %v", err, ErrNotLeader)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := leader.ReadBarrier(ctx); err != nil {
		t.Fatalf("read barrier: %v", err)
	}
}

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
	return newInmemCluster(t, n, opts...).nodes
}

// inmemCluster is startInmem's cluster, kept for tests that restart or cut
// off a member.
type inmemCluster struct {
	t     *testing.T
	cfgs  []Config
	trans []*raft.InmemTransport
	nodes []*Node
}

func newInmemCluster(t *testing.T, n int, opts ...func(*Config)) *inmemCluster {
	t.Helper()
	c := &inmemCluster{t: t}
	var servers []raft.Server
	for i := range n {
		addr, tr := raft.NewInmemTransport("")
		c.trans = append(c.trans, tr)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: ServerID(uint64(i + 1)), Address: addr})
	}
	c.connect()
	for i := range n {
		cfg := Config{
			Name: "m", DataDir: t.TempDir(), ID: uint64(i + 1), Transport: c.trans[i],
			Bootstrap: true, InitialMembers: servers,
			HeartbeatInterval: 20 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
			CommitNotify: time.Hour, RaftLog: discard{},
		}
		for _, o := range opts {
			o(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
		c.nodes = append(c.nodes, nil)
		c.start(i)
	}
	return c
}

// connect joins every transport to every other.
func (c *inmemCluster) connect() {
	for _, a := range c.trans {
		for _, b := range c.trans {
			a.Connect(b.LocalAddr(), b)
		}
	}
}

// start starts member i on its config (and data dir).
func (c *inmemCluster) start(i int) {
	c.t.Helper()
	nd, err := New(c.cfgs[i])
	if err != nil {
		c.t.Fatal(err)
	}
	nd.Start()
	c.t.Cleanup(func() { nd.Close() })
	c.nodes[i] = nd
}

// isolate cuts member i off from the others, both ways.
func (c *inmemCluster) isolate(i int) {
	c.trans[i].DisconnectAll()
	for j, tr := range c.trans {
		if j != i {
			tr.Disconnect(c.trans[i].LocalAddr())
		}
	}
}

// join starts a new member with an empty data dir, joined to the others,
// and has the leader l add it as a voter; it returns the member's index.
func (c *inmemCluster) join(l int) int {
	c.t.Helper()
	addr, tr := raft.NewInmemTransport("")
	i := len(c.nodes)
	cfg := c.cfgs[0]
	cfg.DataDir, cfg.ID, cfg.Transport, cfg.Bootstrap, cfg.InitialMembers = c.t.TempDir(), uint64(i+1), tr, false, nil
	cfg.ForceNewCluster = false
	c.cfgs, c.trans, c.nodes = append(c.cfgs, cfg), append(c.trans, tr), append(c.nodes, nil)
	c.connect()
	c.start(i)
	if _, err := c.nodes[l].addMember(context.Background(), cfg.ID, addr, nil, false); err != nil {
		c.t.Fatal(err)
	}
	return i
}

// restart stops member i and starts it again on its data dir, joined to
// the others by a new transport at its address.
func (c *inmemCluster) restart(i int) {
	c.t.Helper()
	c.nodes[i].Close()
	_, tr := raft.NewInmemTransport(c.trans[i].LocalAddr())
	c.trans[i] = tr
	c.cfgs[i].Transport = tr
	c.connect()
	c.start(i)
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

package transport

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestRaftDialTimeout: a raft dial to a member that accepts the connection
// and never answers (a link that drops packets once connected) gives up
// after RaftDialTimeout, not after raft's own I/O timeout; without it, after
// raft's.
func TestRaftDialTimeout(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close() // the kernel accepts into its backlog; nobody reads

	for _, c := range []struct {
		bound, raftTimeout, atLeast, atMost time.Duration
	}{
		{bound: 200 * time.Millisecond, raftTimeout: 10 * time.Second, atLeast: 200 * time.Millisecond, atMost: 3 * time.Second},
		{bound: 0, raftTimeout: 400 * time.Millisecond, atLeast: 400 * time.Millisecond, atMost: 3 * time.Second},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPeerMux(ln, PeerConfig{Advertise: ln.Addr().String(), RaftDialTimeout: c.bound}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		p.SetIdentity(&testIdentity{id: 1, inc: 7}) // the dial waits for the peer's hello
		layer := &raftLayer{route: p.raft, p: p}
		start := time.Now()
		conn, err := layer.Dial(raft.ServerAddress(silent.Addr().String()), c.raftTimeout)
		took := time.Since(start)
		p.Close()
		if err == nil {
			conn.Close()
			t.Fatalf("bound %v: a dial to a member that never answers succeeded", c.bound)
		}
		if took < c.atLeast || took > c.atMost {
			t.Errorf("bound %v, raft's timeout %v: the dial gave up after %v, want %v-%v", c.bound, c.raftTimeout, took, c.atLeast, c.atMost)
		}
	}
}

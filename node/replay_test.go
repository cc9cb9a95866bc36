package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// restartAlone stops member i and starts it again on its data dir with a
// transport joined to no one, not yet started: what its FSM holds when New
// returns is what it replayed from its own disk. before runs in between.
func (c *inmemCluster) restartAlone(i int, before func(dataDir string)) *Node {
	c.t.Helper()
	c.nodes[i].Close()
	if before != nil {
		before(c.cfgs[i].DataDir)
	}
	_, tr := raft.NewInmemTransport(c.trans[i].LocalAddr())
	c.trans[i] = tr
	c.cfgs[i].Transport = tr
	nd, err := New(c.cfgs[i])
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { nd.Close() })
	c.nodes[i] = nd
	return nd
}

func caughtUp(n *Node) bool {
	select {
	case <-n.CaughtUp():
		return true
	default:
		return false
	}
}

// TestRestartReplaysThroughCommitMark: a follower restarted where no
// leader can reach it holds, when New returns, every write it had applied
// (its commit mark names them); once it rejoins, raft's own applies of
// the same entries change nothing (the revision stays the leader's).
func TestRestartReplaysThroughCommitMark(t *testing.T) {
	c := newInmemCluster(t, 3, noCheckpoints)
	l := waitLeader(t, c.nodes)
	for i := range 5 {
		put(t, c.nodes[l], fmt.Sprintf("k%d", i))
	}
	f := (l + 1) % 3
	want := c.nodes[l].fsm.Applied()
	if err := c.nodes[f].fsm.WaitApplied(context.Background(), want); err != nil {
		t.Fatal(err)
	}
	rev := c.nodes[l].Store().Rev()
	n := c.restartAlone(f, nil)
	if got := n.Store().KeyCount(); got != 5 || n.Store().Rev() != rev {
		t.Fatalf("restarted alone: %d keys at revision %d, want 5 at %d", got, n.Store().Rev(), rev)
	}
	if !caughtUp(n) {
		t.Fatalf("replayed through the log's end %d (applied %d) but not caught up", n.start.index, n.fsm.Applied())
	}

	n.Start()
	c.connect()
	put(t, c.nodes[l], "after")
	want = c.nodes[l].fsm.Applied()
	if err := n.fsm.WaitApplied(context.Background(), want); err != nil {
		t.Fatal(err)
	}
	if got, lr := n.Store().Rev(), c.nodes[l].Store().Rev(); got != lr {
		t.Fatalf("after rejoining: revision %d, the leader's %d (entries applied twice?)", got, lr)
	}
}

// TestRestartIgnoresForeignCommitMark: a mark naming an entry the log
// holds with another term was not written for this log; the member then
// replays nothing and waits to catch up, as without a mark.
func TestRestartIgnoresForeignCommitMark(t *testing.T) {
	c := newInmemCluster(t, 3, noCheckpoints)
	l := waitLeader(t, c.nodes)
	for i := range 5 {
		put(t, c.nodes[l], fmt.Sprintf("k%d", i))
	}
	f := (l + 1) % 3
	want := c.nodes[l].fsm.Applied()
	if err := c.nodes[f].fsm.WaitApplied(context.Background(), want); err != nil {
		t.Fatal(err)
	}
	n := c.restartAlone(f, func(dir string) {
		var b [commitMarkSize]byte
		if _, err := readFile(filepath.Join(dir, commitMarkFile), b[:]); err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint64(b[8:], binary.BigEndian.Uint64(b[8:])+1)
		binary.BigEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
		if err := os.WriteFile(filepath.Join(dir, commitMarkFile), b[:], 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if got := n.Store().KeyCount(); got != 0 || caughtUp(n) {
		t.Fatalf("restarted alone with a foreign mark: %d keys, caught up %v; want none replayed, not caught up", got, caughtUp(n))
	}
}

// TestSingleVoterReplaysItsWholeLog: the only voter commits its whole log
// as soon as it elects itself, so it replays all of it, mark or none (a
// data dir from before the mark existed).
func TestSingleVoterReplaysItsWholeLog(t *testing.T) {
	c := newInmemCluster(t, 1, noCheckpoints)
	waitLeader(t, c.nodes)
	put(t, c.nodes[0], "k")
	rev := c.nodes[0].Store().Rev()
	n := c.restartAlone(0, func(dir string) {
		if err := os.Remove(filepath.Join(dir, commitMarkFile)); err != nil {
			t.Fatal(err)
		}
	})
	if got := n.Store().KeyCount(); got != 1 || n.Store().Rev() != rev || !caughtUp(n) {
		t.Fatalf("single voter restarted: %d keys at revision %d, caught up %v; want 1 at %d, caught up", got, n.Store().Rev(), caughtUp(n), rev)
	}
}

func readFile(path string, b []byte) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.ReadAt(b, 0)
}

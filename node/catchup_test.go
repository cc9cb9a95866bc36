package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
)

// noCheckpoints keeps a test cluster's log to the test's own writes: no
// verification checkpoints (barriers) appended meanwhile. It also sets
// CommitNotify back from startInmem's hour: the commit teller tries a
// follower that was down again after that long, and raft's own idle
// appends come that often.
func noCheckpoints(cfg *Config) {
	cfg.LogVerifyInterval = time.Hour
	cfg.CommitNotify = 50 * time.Millisecond
}

func put(t *testing.T, n *Node, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n.Propose(ctx, fsm.OpPut, &pb.PutRequest{Key: []byte(key), Value: []byte("v")}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func awaitCaughtUp(t *testing.T, n *Node) {
	t.Helper()
	select {
	case <-n.CaughtUp():
	case <-time.After(10 * time.Second):
		t.Fatalf("not caught up after 10 s: log end at start %d (term %d), commit %d, applied %d",
			n.start.index, n.start.term, n.raft.CommitIndex(), n.fsm.Applied())
	}
}

// TestRestartedFollowerCatchesUp: a follower restarted with entries after
// its snapshot (here it has none) is not caught up until its FSM has
// applied them; once it says so, its state holds every write it held
// before the stop.
func TestRestartedFollowerCatchesUp(t *testing.T) {
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
	c.restart(f)
	n := c.nodes[f]
	if n.start.index < want {
		t.Fatalf("restarted with log end %d, before the applied %d", n.start.index, want)
	}
	awaitCaughtUp(t, n)
	if got := n.fsm.Applied(); got < want {
		t.Fatalf("caught up with applied %d, below the %d applied before the restart", got, want)
	}
	if kvs := n.Store().KeyCount(); kvs != 5 {
		t.Fatalf("caught up with %d keys, want 5", kvs)
	}
}

// TestSingleMemberCatchesUp: a one-member cluster hears from no leader but
// itself: new (its log holds the bootstrap configuration) and restarted,
// it catches up once it leads.
func TestSingleMemberCatchesUp(t *testing.T) {
	c := newInmemCluster(t, 1, noCheckpoints)
	waitLeader(t, c.nodes)
	awaitCaughtUp(t, c.nodes[0])
	put(t, c.nodes[0], "k")
	c.restart(0)
	awaitCaughtUp(t, c.nodes[0])
	if kvs := c.nodes[0].Store().KeyCount(); kvs != 1 {
		t.Fatalf("caught up with %d keys, want 1", kvs)
	}
}

// TestJoiningMemberCatchesUp: a member added to a running cluster serves
// once it holds what the leader had committed when it first heard from it,
// not at its first commit: the leader sends a log longer than one append
// (MaxAppendEntries) a batch at a time, each committing up to its end.
func TestJoiningMemberCatchesUp(t *testing.T) {
	c := newInmemCluster(t, 3, noCheckpoints)
	l := waitLeader(t, c.nodes)
	const keys = 1200
	for i := range keys {
		put(t, c.nodes[l], fmt.Sprintf("k%d", i))
	}
	j := c.join(l)
	n := c.nodes[j]
	if n.start != joining {
		t.Fatalf("a joining member starts at %+v, want %+v", n.start, joining)
	}
	awaitCaughtUp(t, n)
	if got := n.Store().KeyCount(); got != keys {
		t.Fatalf("caught up with %d keys, want %d", got, keys)
	}
}

// TestCaughtUpAfterTheTailIsCut covers the second half of the argument in
// catchup.go. A leader cut off from the others appends entries no one else
// holds; the others elect a new leader, which appends only its no-op and
// then idles. Restarted and rejoined, the old leader's tail is cut, and the
// commit index never reaches its old log end: it is caught up because the
// committed no-op is of a later term.
func TestCaughtUpAfterTheTailIsCut(t *testing.T) {
	c := newInmemCluster(t, 3, noCheckpoints)
	l := waitLeader(t, c.nodes)
	put(t, c.nodes[l], "k0")
	committed := c.nodes[l].raft.LastIndex()

	c.isolate(l)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			c.nodes[l].Propose(ctx, fsm.OpPut, &pb.PutRequest{Key: []byte(fmt.Sprintf("lost%d", i)), Value: []byte("v")})
		}()
	}
	wg.Wait() // they fail: the leader steps down without a quorum
	end := c.nodes[l].raft.LastIndex()
	if end < committed+3 {
		t.Fatalf("the cut-off leader's log ends at %d, want at least %d", end, committed+3)
	}
	var others []*Node
	for i, n := range c.nodes {
		if i != l {
			others = append(others, n)
		}
	}
	nl := others[waitLeader(t, others)]
	if got := nl.raft.LastIndex(); got >= end {
		t.Fatalf("the new leader's log ends at %d, at or past the old leader's %d", got, end)
	}

	c.restart(l)
	n := c.nodes[l]
	awaitCaughtUp(t, n)
	commit := n.raft.CommitIndex()
	var entry raft.Log
	if err := n.logs.GetLog(commit, &entry); err != nil {
		t.Fatal(err)
	}
	if commit >= n.start.index || entry.Term <= n.start.term {
		t.Fatalf("caught up at commit %d (term %d), log end at start %d (term %d): not the case under test",
			commit, entry.Term, n.start.index, n.start.term)
	}
	if kvs := n.Store().KeyCount(); kvs != 1 {
		t.Fatalf("caught up with %d keys, want 1 (k0; the cut tail's writes were never committed)", kvs)
	}
}

// TestRaftCommitsBeforeAnswering pins the hashicorp/raft behaviour the
// catch-up relies on (replication's answered signal): a follower has set
// its commit index from an append before it answers that append. If a raft
// upgrade answers first, a catching-up member could miss the commit that
// completes it, and this test fails.
func TestRaftCommitsBeforeAnswering(t *testing.T) {
	var mu sync.Mutex
	byAddr := map[raft.ServerAddress]*Node{}
	checked, late := 0, []string{}
	wrap := func(cfg *Config) {
		cfg.Transport = &answerCheck{InmemTransport: cfg.Transport.(*raft.InmemTransport), check: func(target raft.ServerAddress, args *raft.AppendEntriesRequest) {
			mu.Lock()
			defer mu.Unlock()
			f := byAddr[target]
			if f == nil || args.LeaderCommitIndex == 0 {
				return
			}
			want := min(args.LeaderCommitIndex, args.PrevLogEntry)
			if k := len(args.Entries); k > 0 {
				want = min(args.LeaderCommitIndex, args.Entries[k-1].Index)
			}
			checked++
			if got := f.raft.CommitIndex(); got < want {
				late = append(late, fmt.Sprintf("commit %d after an answered append naming %d", got, want))
			}
		}}
	}
	c := newInmemCluster(t, 3, wrap)
	mu.Lock()
	for i, n := range c.nodes {
		byAddr[c.trans[i].LocalAddr()] = n
	}
	mu.Unlock()
	l := waitLeader(t, c.nodes)
	for i := range 10 {
		put(t, c.nodes[l], fmt.Sprintf("k%d", i))
	}
	mu.Lock()
	defer mu.Unlock()
	if checked == 0 || len(late) > 0 {
		t.Fatalf("%d answered appends checked; late: %v", checked, late)
	}
}

// answerCheck calls check after each successful append it sent.
type answerCheck struct {
	*raft.InmemTransport
	check func(raft.ServerAddress, *raft.AppendEntriesRequest)
}

func (a *answerCheck) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := a.InmemTransport.AppendEntries(id, target, args, resp)
	if err == nil && resp.Success {
		a.check(target, args)
	}
	return err
}

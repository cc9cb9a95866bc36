package node

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/logstore"
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
// the leader's own write of it has not finished, and the write commits
// once the leader's write returns. Without early replication
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
	if _, _, err := leader.ProposeEncoded(ctx, warm); err != nil {
		t.Fatalf("warm-up put: %v", err)
	}
	waitFollowersIdle(t, leader, nodes)

	start := time.Now()
	if _, _, err := leader.ProposeEncoded(ctx, cmd); err != nil {
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
	if n := testutil.ToFloat64(leader.repl.answeredAppends); n == 0 {
		t.Fatal(`corenode_raft_leader_appends_total{outcome="answered"} is 0 on the leader`)
	}
}

// TestEarlyReplicationKeepsEveryWrite: many writers at once through the
// leader, with early appends and raft's crossing; every write applies on
// every member, in the same order.
func TestEarlyReplicationKeepsEveryWrite(t *testing.T) {
	nodes := startInmem(t, 3)
	leader := nodes[waitLeader(t, nodes)]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				cmd, err := fsm.Encode(fsm.OpPut, &pb.PutRequest{Key: []byte{'k', byte(w), byte(i)}, Value: []byte("v")})
				if err == nil {
					_, _, err = leader.ProposeEncoded(ctx, cmd)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("put: %v", err)
	}
	if testutil.ToFloat64(leader.metrics.earlyAppends) == 0 {
		t.Fatal("no early append under 8 writers")
	}
	last := leader.raft.LastIndex()
	for _, n := range nodes {
		deadline := time.Now().Add(10 * time.Second)
		for n.raft.AppliedIndex() < last {
			if time.Now().After(deadline) {
				t.Fatalf("member %d applied %d of %d", n.ID(), n.raft.AppliedIndex(), last)
			}
			time.Sleep(time.Millisecond)
		}
		for i := uint64(1); i <= last; i++ {
			var a, b raft.Log
			if err := leader.logs.GetLog(i, &a); err != nil {
				t.Fatal(err)
			}
			if err := n.logs.GetLog(i, &b); err != nil {
				t.Fatalf("member %d: entry %d: %v", n.ID(), i, err)
			}
			if a.Term != b.Term || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("member %d: entry %d differs from the leader's", n.ID(), i)
			}
		}
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

// TestRaftAppendsAnsweredFromEarlyAcknowledgement: once a follower has
// acknowledged entries in this term, raft's append of them is answered
// without a round trip, and an append that carries more is sent without
// them; raft's own request is left as it built it. An acknowledgement
// older than answerAge answers nothing: raft takes an answer for contact.
func TestRaftAppendsAnsweredFromEarlyAcknowledgement(t *testing.T) {
	r, rt := newRecordingReplication(t)
	const f = raft.ServerID("f1")
	var resp raft.AppendEntriesResponse

	// An early append of 11-13 after 10, which the follower takes.
	if err := r.appendEarly(f, "f1", appendReq(5, 10, 4, entries(5, 11, 13)), &resp); err != nil || !resp.Success {
		t.Fatalf("early append: %v, %+v", err, resp)
	}
	if match, _, _, _ := r.progress(f, 5); match != 13 {
		t.Fatalf("match after the early append = %d, want 13", match)
	}

	// raft's append of 11-13: every entry acknowledged, nothing sent.
	resp = raft.AppendEntriesResponse{}
	if err := r.AppendEntries(f, "f1", appendReq(5, 10, 4, entries(5, 11, 13)), &resp); err != nil {
		t.Fatal(err)
	}
	if !resp.Success || resp.Term != 5 || resp.LastLog != 13 {
		t.Fatalf("answer = %+v, want success in term 5 with last log 13", resp)
	}
	if n := len(rt.appends()); n != 1 {
		t.Fatalf("%d appends reached the transport, want 1 (the early one)", n)
	}

	// raft's append of 12-15: 12 and 13 are acknowledged, 14-15 go.
	req := appendReq(5, 11, 5, entries(5, 12, 15))
	if err := r.AppendEntries(f, "f1", req, &resp); err != nil || !resp.Success {
		t.Fatalf("append 12-15: %v, %+v", err, resp)
	}
	sent := rt.appends()
	if len(sent) != 2 {
		t.Fatalf("%d appends reached the transport, want 2", len(sent))
	}
	got := sent[1]
	if got.PrevLogEntry != 13 || got.PrevLogTerm != 5 || len(got.Entries) != 2 || got.Entries[0].Index != 14 {
		t.Fatalf("trimmed append: prev %d term %d, %d entries from %d; want prev 13 term 5, 2 entries from 14",
			got.PrevLogEntry, got.PrevLogTerm, len(got.Entries), got.Entries[0].Index)
	}
	if req.PrevLogEntry != 11 || len(req.Entries) != 4 {
		t.Fatalf("raft's request was changed: prev %d, %d entries", req.PrevLogEntry, len(req.Entries))
	}
	if match, _, _, _ := r.progress(f, 5); match != 15 {
		t.Fatalf("match = %d, want 15", match)
	}

	// An old acknowledgement: raft's append of 15 goes out again.
	later := time.Now().Add(2 * r.answerAge)
	r.mu.Lock()
	r.now = func() time.Time { return later }
	r.mu.Unlock()
	if err := r.AppendEntries(f, "f1", appendReq(5, 14, 5, entries(5, 15, 15)), &resp); err != nil || !resp.Success {
		t.Fatalf("append 15: %v, %+v", err, resp)
	}
	if n := len(rt.appends()); n != 3 {
		t.Fatalf("%d appends reached the transport, want 3: an old acknowledgement must not answer", n)
	}

	// A new term: what was acknowledged to the old leader proves nothing.
	if err := r.AppendEntries(f, "f1", appendReq(6, 10, 4, entries(6, 11, 12)), &resp); err != nil {
		t.Fatal(err)
	}
	if n := len(rt.appends()); n != 4 {
		t.Fatalf("%d appends reached the transport, want 4: term 6's append must be sent", n)
	}

	for outcome, c := range map[string]prometheus.Counter{"answered": r.answeredAppends, "trimmed": r.trimmedAppends, "sent": r.sentAppends} {
		want := 1.0
		if outcome == "sent" {
			want = 2
		}
		if got := testutil.ToFloat64(c); got != want {
			t.Errorf("corenode_raft_leader_appends_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
}

// holdingTransport is a recordingTransport whose appends wait while hold
// says so for them.
type holdingTransport struct {
	*recordingTransport
	hold func(args *raft.AppendEntriesRequest) <-chan struct{}
}

func (t *holdingTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if c := t.hold(args); c != nil {
		<-c
	}
	return t.recordingTransport.AppendEntries(id, target, args, resp)
}

func newHoldingReplication(t *testing.T, earlyWait time.Duration, hold func(*raft.AppendEntriesRequest) <-chan struct{}) (*replication, *recordingTransport) {
	t.Helper()
	_, inmem := raft.NewInmemTransport("leader")
	rt := &recordingTransport{InmemTransport: inmem}
	return newReplication(&holdingTransport{rt, hold}, logstore.NewHealth(quiet), newMetrics(), time.Second, earlyWait), rt
}

// TestRaftAppendWaitsForEarlyOnTheWire: raft's append of entries an early
// append carries waits for that append's answer, and is then answered
// without a round trip.
func TestRaftAppendWaitsForEarlyOnTheWire(t *testing.T) {
	release := make(chan struct{})
	r, rt := newHoldingReplication(t, time.Minute, func(args *raft.AppendEntriesRequest) <-chan struct{} {
		if len(args.Entries) > 0 && args.Entries[0].Index == 4 {
			return release
		}
		return nil
	})
	const f = raft.ServerID("f1")
	var resp raft.AppendEntriesResponse
	if err := r.appendEarly(f, "f1", appendReq(3, 0, 0, entries(3, 1, 3)), &resp); err != nil {
		t.Fatal(err)
	}
	early := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		early <- r.appendEarly(f, "f1", appendReq(3, 3, 3, entries(3, 4, 6)), &resp)
	}()
	waitFor(t, "the early append on the wire", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.peerLocked(f, 3).wire != nil
	})
	done := make(chan raft.AppendEntriesResponse, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		if err := r.AppendEntries(f, "f1", appendReq(3, 3, 3, entries(3, 4, 5)), &resp); err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	select {
	case <-done:
		t.Fatal("raft's append of 4-5 went while the early append of 4-6 was on the wire")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-early; err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-done:
		if !resp.Success || resp.LastLog != 5 {
			t.Fatalf("raft's append: %+v, want success with last log 5", resp)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("raft's append still waits after the early append was answered")
	}
	if n := len(rt.appends()); n != 2 {
		t.Fatalf("%d appends reached the transport, want 2 (both early)", n)
	}
}

// TestEarlyAppendCannotWedgeRaft is anomaly 5 of docs/reliability.md: a
// member led term 7, was cut off, and led term 8 at once; a replicator of
// term 7 still blocked on a dead connection sent one more append. That
// append used to count as in flight in term 8 forever, the early sender
// waited for its answer holding its batch, raft's append waited for the
// early sender, and no write committed again. Now an append of term 7
// is not counted in term 8, and raft's append waits only for an early
// append on the wire, and at most earlyWait even if that one never
// returns (a connection dead until the transport's timeout).
func TestEarlyAppendCannotWedgeRaft(t *testing.T) {
	never := make(chan struct{})
	defer close(never)
	r, _ := newHoldingReplication(t, 100*time.Millisecond, func(args *raft.AppendEntriesRequest) <-chan struct{} {
		if args.Term == 7 || len(args.Entries) > 0 && args.Entries[0].Index == 13 && args.Term == 8 && args.PrevLogEntry == 12 && args.LeaderCommitIndex == 11 {
			return never
		}
		return nil
	})
	const f = raft.ServerID("f1")
	var resp raft.AppendEntriesResponse
	r.progress(f, 8) // term 8's records exist
	go r.AppendEntries(f, "f1", appendReq(7, 10, 7, entries(7, 11, 12)), new(raft.AppendEntriesResponse))
	if err := r.AppendEntries(f, "f1", appendReq(8, 10, 7, entries(8, 11, 12)), &resp); err != nil || !resp.Success {
		t.Fatalf("term 8's append of 11-12: %v, %+v", err, resp)
	}
	time.Sleep(10 * time.Millisecond) // let term 7's append reach the transport
	if _, _, inflight, _ := r.progress(f, 8); inflight {
		t.Fatal("term 7's append, stuck on its connection, counts as in flight in term 8")
	}

	// An early append of 13-14 that never comes back.
	early := appendReq(8, 12, 8, entries(8, 13, 14))
	early.LeaderCommitIndex = 11
	go r.appendEarly(f, "f1", early, new(raft.AppendEntriesResponse))
	waitFor(t, "the early append on the wire", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.peerLocked(f, 8).wire != nil
	})
	done := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		done <- r.AppendEntries(f, "f1", appendReq(8, 12, 8, entries(8, 13, 14)), &resp)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("raft's append waits for an early append that never returns")
	}
	if match, _, _, _ := r.progress(f, 8); match != 14 {
		t.Fatalf("match %d after raft's own append of 13-14, want 14", match)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatchesWithACheckpointAreNotSentEarly: the leader's log store stamps
// a verification checkpoint as it stores it; early replication, which
// sends before the store, leaves such a batch to raft (a follower would
// get it unstamped, and the encoding raced the stamp: TestLogVerification
// under -race).
func TestBatchesWithACheckpointAreNotSentEarly(t *testing.T) {
	cmd := &raft.Log{Index: 7, Type: raft.LogCommand}
	barrier := &raft.Log{Index: 8, Type: raft.LogBarrier}
	if stampedOnStore([]*raft.Log{cmd}) {
		t.Fatal("a batch of commands counted as stamped on store")
	}
	if !stampedOnStore([]*raft.Log{cmd, barrier}) {
		t.Fatal("a batch with a verification checkpoint would be sent early")
	}
}

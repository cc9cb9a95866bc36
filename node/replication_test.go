package node

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// recordingTransport is a raft transport whose appends reach no one: it
// records each and answers it with success in the request's term.
type recordingTransport struct {
	*raft.InmemTransport

	mu   sync.Mutex
	sent []raft.AppendEntriesRequest
}

func (t *recordingTransport) AppendEntries(_ raft.ServerID, _ raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = append(t.sent, *args)
	*resp = raft.AppendEntriesResponse{Term: args.Term, Success: true}
	return nil
}

func (t *recordingTransport) appends() []raft.AppendEntriesRequest {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]raft.AppendEntriesRequest(nil), t.sent...)
}

func newRecordingReplication(t *testing.T) (*replication, *recordingTransport) {
	t.Helper()
	_, inmem := raft.NewInmemTransport("leader")
	rt := &recordingTransport{InmemTransport: inmem}
	return newReplication(rt, newMetrics()), rt
}

// entries returns log entries first through last of term.
func entries(term, first, last uint64) []*raft.Log {
	var logs []*raft.Log
	for i := first; i <= last; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	return logs
}

func appendReq(term, prev, prevTerm uint64, logs []*raft.Log) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{Term: term, PrevLogEntry: prev, PrevLogTerm: prevTerm, Entries: logs, LeaderCommitIndex: prev}
}

// TestRaftAppendsAnsweredFromEarlyAcknowledgement: once a follower has
// acknowledged entries in this term, raft's append of them is answered
// without a round trip, and an append that carries more is sent without
// them; raft's own request is left as it built it.
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

	// A new term: what was acknowledged to the old leader proves nothing.
	if err := r.AppendEntries(f, "f1", appendReq(6, 10, 4, entries(6, 11, 12)), &resp); err != nil {
		t.Fatal(err)
	}
	if n := len(rt.appends()); n != 3 {
		t.Fatalf("%d appends reached the transport, want 3: term 6's append must be sent", n)
	}

	for outcome, c := range map[string]prometheus.Counter{"answered": r.answered, "trimmed": r.trimmed, "sent": r.sent} {
		if got := testutil.ToFloat64(c); got != 1 {
			t.Errorf("corenode_raft_leader_appends_total{outcome=%q} = %v, want 1", outcome, got)
		}
	}
}

// TestRaftAppendWaitsForEarlySender: raft's append of entries the early
// sender holds waits until they are sent, then goes without them; and
// closing the transport releases a waiting append.
func TestRaftAppendWaitsForEarlySender(t *testing.T) {
	r, rt := newRecordingReplication(t)
	const f = raft.ServerID("f1")
	var resp raft.AppendEntriesResponse
	if err := r.appendEarly(f, "f1", appendReq(3, 0, 0, entries(3, 1, 3)), &resp); err != nil {
		t.Fatal(err)
	}

	r.claimEarly(f, 3, 4, 6)
	done := make(chan raft.AppendEntriesResponse)
	go func() {
		var resp raft.AppendEntriesResponse
		if err := r.AppendEntries(f, "f1", appendReq(3, 3, 3, entries(3, 4, 5)), &resp); err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	select {
	case <-done:
		t.Fatal("raft's append of 4-5 went while the early sender held 4-6")
	case <-time.After(50 * time.Millisecond):
	}
	if err := r.appendEarly(f, "f1", appendReq(3, 3, 3, entries(3, 4, 6)), &resp); err != nil {
		t.Fatal(err)
	}
	r.claimEarly(f, 3, 0, 0)
	select {
	case resp := <-done:
		if !resp.Success || resp.LastLog != 5 {
			t.Fatalf("raft's append: %+v, want success with last log 5", resp)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("raft's append still waits after the early sender let go")
	}
	if n := len(rt.appends()); n != 2 {
		t.Fatalf("%d appends reached the transport, want 2 (both early)", n)
	}

	// An append starting before what the sender holds does not wait: the
	// sender needs its answer first.
	r.claimEarly(f, 3, 9, 9)
	if err := r.AppendEntries(f, "f1", appendReq(3, 6, 3, entries(3, 7, 8)), &resp); err != nil {
		t.Fatal(err)
	}

	r.claimEarly(f, 3, 9, 12)
	go func() {
		var resp raft.AppendEntriesResponse
		r.AppendEntries(f, "f1", appendReq(3, 8, 3, entries(3, 9, 10)), &resp)
		done <- resp
	}()
	r.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not release raft's waiting append")
	}
}

// TestStaleTermAppendLeavesNoInflight: an append of an earlier term that
// starts after this term's records exist (a deposed leader's replicator
// still winding down when the member leads again) must not count as in
// flight in this term. It used to, and was never uncounted: the early
// sender then held its entries forever waiting for that answer, and
// raft's append of them waited for the early sender, so no write
// committed again in the term (seen in docker-mode jepsen-lite after
// isolate-leader).
func TestStaleTermAppendLeavesNoInflight(t *testing.T) {
	r, _ := newRecordingReplication(t)
	const f = raft.ServerID("f1")
	r.progress(f, 8) // term 8's records exist
	var resp raft.AppendEntriesResponse
	if err := r.AppendEntries(f, "f1", appendReq(7, 10, 7, entries(7, 11, 12)), &resp); err != nil {
		t.Fatal(err)
	}
	if _, _, inflight, _ := r.progress(f, 8); inflight {
		t.Fatal("a finished append of term 7 is still in flight in term 8")
	}
	if match, _, _, _ := r.progress(f, 8); match != 0 {
		t.Fatalf("term 8's match = %d after an append of term 7, want 0", match)
	}

	// The wedge itself: the early sender holds 13-14 while something is in
	// flight; raft's append starting at 13 must not wait on it forever.
	r.claimEarly(f, 8, 13, 14)
	done := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		done <- r.AppendEntries(f, "f1", appendReq(8, 12, 7, entries(8, 13, 14)), &resp)
	}()
	select {
	case err := <-done:
		t.Fatalf("raft's append went out while the early sender held its entries: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	// The sender, seeing nothing in flight, sends and lets go.
	if _, _, inflight, _ := r.progress(f, 8); inflight {
		t.Fatal("the early sender would wait for an append that is not on its way")
	}
	r.claimEarly(f, 8, 0, 0)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("raft's append still waiting after the early sender let go")
	}
}

package node

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/logstore"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var errDiskFull = errors.New("no space left on device")

// recordingTransport is a raft transport whose appends reach no one: it
// records each and answers it with success in the request's term.
type recordingTransport struct {
	*raft.InmemTransport

	mu   sync.Mutex
	sent []raft.AppendEntriesRequest
	down bool // fail every append, as to a follower that is down
}

func (t *recordingTransport) AppendEntries(_ raft.ServerID, _ raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.down {
		return errors.New("connection refused")
	}
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
	return newReplication(rt, logstore.NewHealth(quiet), newMetrics(), time.Second, time.Second), rt
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

// TestProgressFollowsAnswers: a successful append of this term moves the
// follower's match to its last entry and what it was told to the commit
// index it carried (at most that entry); a refused one moves nothing.
func TestProgressFollowsAnswers(t *testing.T) {
	r, _ := newRecordingReplication(t)
	const f = raft.ServerID("f1")
	var resp raft.AppendEntriesResponse
	req := appendReq(3, 10, 3, entries(3, 11, 14))
	req.LeaderCommitIndex = 12
	if err := r.AppendEntries(f, "f1", req, &resp); err != nil {
		t.Fatal(err)
	}
	match, told, inflight, _ := r.progress(f, 3)
	if match != 14 || told != 12 || inflight {
		t.Fatalf("after an append of 11-14 with commit 12: match %d told %d inflight %v, want 14 12 false", match, told, inflight)
	}
	// A commit index past the append's last entry tells only up to it.
	req = appendReq(3, 14, 3, nil)
	req.LeaderCommitIndex = 20
	if err := r.AppendEntries(f, "f1", req, &resp); err != nil {
		t.Fatal(err)
	}
	if _, told, _, _ := r.progress(f, 3); told != 14 {
		t.Fatalf("told %d after commit 20 over entries up to 14, want 14", told)
	}
	// A later term starts from nothing: the old match proves nothing.
	if match, told, _, _ := r.progress(f, 4); match != 0 || told != 0 {
		t.Fatalf("term 4 starts at match %d told %d", match, told)
	}
}

// TestUnreachableFollowerIsToldAgain: a follower that cannot be reached
// may be restarting, and a restarted follower forgets the commit index it
// was told; a failed heartbeat or append resets told (match stands: the
// follower keeps its log) and wakes the commit teller.
func TestUnreachableFollowerIsToldAgain(t *testing.T) {
	for _, kind := range []string{"heartbeat", "append"} {
		t.Run(kind, func(t *testing.T) {
			r, rt := newRecordingReplication(t)
			const f = raft.ServerID("f1")
			var resp raft.AppendEntriesResponse
			if err := r.AppendEntries(f, "f1", appendReq(3, 10, 3, entries(3, 11, 14)), &resp); err != nil {
				t.Fatal(err)
			}
			_, _, _, changed := r.progress(f, 3)
			rt.mu.Lock()
			rt.down = true
			rt.mu.Unlock()
			req := &raft.AppendEntriesRequest{Term: 3} // a heartbeat
			if kind == "append" {
				req = appendReq(3, 14, 3, entries(3, 15, 15))
			}
			if err := r.AppendEntries(f, "f1", req, &resp); err == nil {
				t.Fatal("an append to a follower that is down succeeded")
			}
			select {
			case <-changed:
			default:
				t.Fatal("a failed append did not wake the commit teller")
			}
			if match, told, inflight, _ := r.progress(f, 3); match != 14 || told != 0 || inflight {
				t.Fatalf("after a failed %s: match %d told %d inflight %v, want 14 0 false", kind, match, told, inflight)
			}
		})
	}
}

// TestStaleTermAppendLeavesNoInflight: an append of an earlier term (a
// deposed leader's replicator still winding down when the member leads
// again) must not count as in flight in this term: it would never be
// uncounted, and the commit teller would wait for its answer for the rest
// of the term.
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
}

// TestRaftHeartbeatShape pins the hashicorp/raft behaviour replication
// relies on to tell heartbeats from appends: a leader's heartbeat carries
// no entries, no previous entry and no commit index. If a raft upgrade
// changes that, heartbeats would count as appends in flight (or appends
// as heartbeats), and this test fails.
func TestRaftHeartbeatShape(t *testing.T) {
	seen := make(chan raft.AppendEntriesRequest, 256)
	startInmem(t, 3, func(cfg *Config) {
		cfg.Transport = &shapeTransport{InmemTransport: cfg.Transport.(*raft.InmemTransport), seen: seen}
	})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case req := <-seen:
			if len(req.Entries) == 0 && req.PrevLogEntry == 0 && req.LeaderCommitIndex == 0 {
				return // a heartbeat, in the shape replication expects
			}
		case <-deadline:
			t.Fatal("no append with no entries, previous entry or commit index (raft's heartbeat) in 10 s")
		}
	}
}

// shapeTransport passes everything to the in-memory transport (pre-vote
// included) and shows the appends it carries.
type shapeTransport struct {
	*raft.InmemTransport
	seen chan raft.AppendEntriesRequest
}

func (t *shapeTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	select {
	case t.seen <- *args:
	default:
	}
	return t.InmemTransport.AppendEntries(id, target, args, resp)
}

// TestNoVoteRequestsWhileUnwritable: a member that cannot persist sends no
// pre-vote or vote requests, so its candidacy ends at the pre-vote; the
// error must not read as a peer without pre-vote, which raft counts as a
// granted pre-vote.
func TestNoVoteRequestsWhileUnwritable(t *testing.T) {
	_, inmem := raft.NewInmemTransport("a")
	s := logstore.NewHealth(quiet)
	r := newReplication(inmem, s, newMetrics(), time.Second, time.Second)
	s.Fail("append to the raft log", errDiskFull)
	if err := r.RequestPreVote("b", "b", &raft.RequestPreVoteRequest{}, &raft.RequestPreVoteResponse{}); !errors.Is(err, errNoCampaign) {
		t.Fatalf("pre-vote request while unable to persist: %v", err)
	}
	if err := r.RequestVote("b", "b", &raft.RequestVoteRequest{}, &raft.RequestVoteResponse{}); !errors.Is(err, errNoCampaign) {
		t.Fatalf("vote request while unable to persist: %v", err)
	}
	// With the state clear, requests go out (to nobody: the in-memory
	// transport has no peer "b", and says so).
	s.Clear()
	if err := r.RequestPreVote("b", "b", &raft.RequestPreVoteRequest{}, &raft.RequestPreVoteResponse{}); errors.Is(err, errNoCampaign) {
		t.Fatalf("pre-vote request refused after the disk recovered")
	}
}

// TestTimeoutNowRefusedWhileUnwritable: a member that cannot persist
// answers a leader's TimeoutNow with its reason instead of handing it to
// raft, which would campaign at once and hold its main goroutine on the
// term write; with the disk back, TimeoutNow reaches raft again.
func TestTimeoutNowRefusedWhileUnwritable(t *testing.T) {
	addrA, a := raft.NewInmemTransport("a")
	addrB, b := raft.NewInmemTransport("b")
	a.Connect(addrB, b)
	b.Connect(addrA, a)
	s := logstore.NewHealth(quiet)
	r := newReplication(b, s, newMetrics(), time.Second, time.Second)
	defer r.Close()
	consumer := r.Consumer()

	s.Fail("append to the raft log", errDiskFull)
	err := a.TimeoutNow("b", addrB, &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{})
	if err == nil || !strings.Contains(err.Error(), ErrTransfereeCannotPersist.Error()) {
		t.Fatalf("TimeoutNow to a member that cannot persist: %v, want its refusal", err)
	}
	select {
	case rpc := <-consumer:
		t.Fatalf("raft received %T while the member could not persist", rpc.Command)
	default:
	}
	// Other RPCs still reach raft: the member follows while it cannot lead.
	answered := make(chan error, 1)
	go func() {
		answered <- a.AppendEntries("b", addrB, &raft.AppendEntriesRequest{Term: 1}, &raft.AppendEntriesResponse{})
	}()
	rpc := <-consumer
	if _, ok := rpc.Command.(*raft.AppendEntriesRequest); !ok {
		t.Fatalf("raft received %T, want the append", rpc.Command)
	}
	rpc.Respond(&raft.AppendEntriesResponse{}, nil)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}

	s.Clear()
	go func() {
		answered <- a.TimeoutNow("b", addrB, &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{})
	}()
	rpc = <-consumer
	if _, ok := rpc.Command.(*raft.TimeoutNowRequest); !ok {
		t.Fatalf("raft received %T, want the TimeoutNow", rpc.Command)
	}
	rpc.Respond(&raft.TimeoutNowResponse{}, nil)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
}

// heldTransport holds each append until the test answers it: success or
// refusal, in the request's term.
type heldTransport struct {
	*raft.InmemTransport
	entered chan struct{}
	answer  chan bool
}

func (t *heldTransport) AppendEntries(_ raft.ServerID, _ raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	t.entered <- struct{}{}
	*resp = raft.AppendEntriesResponse{Term: args.Term, Success: <-t.answer}
	return nil
}

// TestSentCoversAppendsInFlight: the commit teller may name an entry as the
// previous one of its append as soon as raft's append carrying it is on
// its way (sent), before the follower answers (match); a refused append
// takes sent back to what the follower acknowledged.
func TestSentCoversAppendsInFlight(t *testing.T) {
	_, inmem := raft.NewInmemTransport("leader")
	ht := &heldTransport{InmemTransport: inmem, entered: make(chan struct{}), answer: make(chan bool)}
	r := newReplication(ht, logstore.NewHealth(quiet), newMetrics(), time.Second, time.Second)
	const f = raft.ServerID("f1")
	send := func(req *raft.AppendEntriesRequest, ok bool) (check func()) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			var resp raft.AppendEntriesResponse
			r.AppendEntries(f, "f1", req, &resp)
		}()
		<-ht.entered
		return func() { ht.answer <- ok; <-done }
	}
	answer := send(appendReq(3, 10, 3, entries(3, 11, 14)), true)
	match, _, inflight, _ := r.progress(f, 3)
	if got := r.sent(f, 3); got != 14 || match != 0 || !inflight {
		t.Fatalf("append of 11-14 in flight: sent %d match %d inflight %v, want 14 0 true", got, match, inflight)
	}
	answer()
	if got := r.sent(f, 3); got != 14 {
		t.Fatalf("after its answer: sent %d, want 14", got)
	}
	send(appendReq(3, 14, 3, entries(3, 15, 16)), false)()
	if got := r.sent(f, 3); got != 14 {
		t.Fatalf("after a refused append of 15-16: sent %d, want 14 (the follower's match)", got)
	}
	if got := r.sent(f, 4); got != 0 {
		t.Fatalf("term 4: sent %d, want 0", got)
	}
}

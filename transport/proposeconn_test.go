package transport

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/corenode/corenode/fsm"
)

// newTestPeerMux serves a peer port on loopback.
func newTestPeerMux(t *testing.T) *PeerMux {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPeerMux(ln, PeerConfig{Advertise: ln.Addr().String()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// answerPuts is a leader's end of a proposal connection c that answers
// every put (putAnswer) and every read-index question (an empty record)
// with readIndex, until c fails.
func answerPuts(c net.Conn, readIndex uint64) {
	rf := newRawFrames(c)
	if _, err := c.Write([]byte{proposeHello}); err != nil {
		return
	}
	var in frame
	for rf.recv(&in) == nil {
		var out frame
		for b := []byte(in); len(b) > 0; {
			id, cmd, rest, err := readRecord(b, nil)
			if err != nil {
				return
			}
			b = rest
			if len(cmd) == 0 {
				out = append(out, encodeAnswer(id, emptyAnswer{}, readIndex, nil)...)
				continue
			}
			out = append(out, putAnswer(id, cmd)...)
		}
		if rf.send(out) != nil {
			return
		}
	}
}

// putAnswer answers a put of key "k<n>" with revision n, applied at n+1000,
// as a leader does.
func putAnswer(id uint64, cmd []byte) []byte {
	c, err := fsm.Decode(cmd)
	if err != nil {
		return encodeAnswer(id, nil, 0, err)
	}
	var rev int64
	fmt.Sscanf(string(c.Msg.(*pb.PutRequest).Key), "k%d", &rev)
	return encodeAnswer(id, &pb.PutResponse{Header: &pb.ResponseHeader{Revision: rev}}, uint64(rev)+1000, nil)
}

// proposeKeys proposes puts of k0..k(n-1) through p to leader at once and
// checks each caller gets its own answer.
func proposeKeys(t *testing.T, p *PeerClient, leader string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			cmd, err := fsm.Encode(fsm.OpPut, &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i)})
			if err != nil {
				errs <- err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			body, index, err := p.Propose(ctx, leader, cmd)
			if err != nil {
				errs <- fmt.Errorf("command %d: %w", i, err)
				return
			}
			var resp pb.PutResponse
			if err := resp.Unmarshal(body); err != nil {
				errs <- err
				return
			}
			if resp.Header.Revision != int64(i) || index != uint64(i)+1000 {
				errs <- fmt.Errorf("command %d got revision %d at index %d", i, resp.Header.Revision, index)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestProposalConnCarriesCommands: between members of this version, a
// follower's commands go on a proposal connection of their own (the
// leader's mux routes it, the leader says hello first) and every caller
// gets its own answer.
func TestProposalConnCarriesCommands(t *testing.T) {
	leader := newTestPeerMux(t)
	var accepted sync.WaitGroup
	accepted.Add(1)
	go func() {
		c, err := leader.ProposalListener().Accept()
		if err != nil {
			return
		}
		accepted.Done()
		defer c.Close()
		answerPuts(c, 0)
	}()
	p := NewPeerClient(newTestPeerMux(t), time.Second)
	defer p.Close()
	proposeKeys(t, p, leader.Addr().String(), 100)
	accepted.Wait() // one connection carried them all
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.legacy) != 0 || len(p.conns) != 0 {
		t.Fatalf("the commands went by gRPC (legacy %v, gRPC connections %d)", p.legacy, len(p.conns))
	}
}

// TestProposalConnFallsBackToGRPC: a leader of an earlier version closes a
// proposal connection it does not know; the follower sends its commands on
// the gRPC stream instead, and remembers to.
func TestProposalConnFallsBackToGRPC(t *testing.T) {
	grpcRoute, ln := earlierVersionMux(t, streamGRPC)
	fakeLeader(t, grpcRoute, func(_ grpc.ServerStream, id uint64, cmd []byte) []byte { return putAnswer(id, cmd) })

	p := NewPeerClient(newTestPeerMux(t), time.Second)
	defer p.Close()
	addr := ln.Addr().String()
	proposeKeys(t, p, addr, 50)
	p.mu.Lock()
	_, legacy := p.legacy[addr]
	p.mu.Unlock()
	if !legacy {
		t.Fatal("the follower did not remember that the leader takes no proposal connections")
	}
}

// earlierVersionMux is the peer port of a member of an earlier version that
// knows one stream kind and closes a connection of any other; it returns
// that kind's route and the listener.
func earlierVersionMux(t *testing.T, kind byte) (*route, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := newRoute(ln.Addr())
	old := &mux{ln: ln, log: slog.New(slog.DiscardHandler), routes: []*route{r},
		classify: func(_ net.Conn, br *bufio.Reader) (*route, error) {
			if b, err := br.ReadByte(); err != nil || b != kind {
				return nil, fmt.Errorf("unknown peer stream type %q", b)
			}
			return r, nil
		}}
	go old.serve()
	t.Cleanup(func() { ln.Close() })
	return r, ln
}

// TestProposalConnCarriesReadIndex: a follower asks the leader's read
// index on its proposal connection, with no HTTP/2 request (a gRPC call
// made the leader log the follower's request under GODEBUG=http2debug=2
// before any client's, which etcd 3.7's TestAuthority reads as the
// :authority the member's clients sent); the leader's answer is its read
// index, and the commands still get theirs.
func TestProposalConnCarriesReadIndex(t *testing.T) {
	leader := newTestPeerMux(t)
	go func() {
		c, err := leader.ProposalListener().Accept()
		if err != nil {
			return
		}
		defer c.Close()
		answerPuts(c, 4242)
	}()
	p := NewPeerClient(newTestPeerMux(t), time.Second)
	defer p.Close()
	addr := leader.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	index, err := p.ReadIndex(ctx, addr)
	if err != nil || index != 4242 {
		t.Fatalf("read index %d, %v; want 4242", index, err)
	}
	proposeKeys(t, p, addr, 20)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.legacy) != 0 || len(p.conns) != 0 {
		t.Fatalf("went by gRPC (legacy %v, gRPC connections %d)", p.legacy, len(p.conns))
	}
}

// TestProposalConnWithoutReads: a leader of an earlier version that takes
// proposal connections but not read-index questions closes the
// streamProposeReads one; the follower opens a streamPropose one for its
// commands (not the gRPC stream) and asks read indexes by gRPC.
func TestProposalConnWithoutReads(t *testing.T) {
	r, ln := earlierVersionMux(t, streamPropose)
	go func() {
		c, err := r.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		answerPuts(c, 0)
	}()
	p := NewPeerClient(newTestPeerMux(t), time.Second)
	defer p.Close()
	addr := ln.Addr().String()
	proposeKeys(t, p, addr, 20)
	st, err := p.proposals.streamTo(context.Background(), proposalTarget{key: addr, open: p.open}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rf, ok := st.fc.(*rawFrames); !ok || rf.reads {
		t.Fatalf("the commands went on %T (reads %v), want a streamPropose connection", st.fc, ok && rf.reads)
	}
	if _, ok, _ := p.proposals.readIndex(context.Background(), time.Second, proposalTarget{key: addr, open: p.open}); ok {
		t.Fatal("a read-index question went to a leader that does not take them")
	}
}

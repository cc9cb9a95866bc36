package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/server"
)

// fakeLeader serves /corenode.Peer/Propose with answer deciding each
// command's outcome; it speaks the wire format serveProposals speaks.
func fakeLeader(t *testing.T, ln net.Listener, answer func(stream grpc.ServerStream, id uint64, cmd []byte) []byte) {
	t.Helper()
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "corenode.Peer",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName: "Propose", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				var in frame
				for {
					if err := stream.RecvMsg(&in); err != nil {
						return nil
					}
					var out frame
					for b := []byte(in); len(b) > 0; {
						id, cmd, rest, err := readRecord(b, nil)
						if err != nil {
							return err
						}
						b = rest
						out = append(out, answer(stream, id, cmd)...)
					}
					if len(out) > 0 {
						if err := stream.SendMsg(&out); err != nil {
							return err
						}
					}
				}
			},
		}},
	}, struct{}{})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
}

// putCommand is an encoded put of key "k".
func putCommand(t *testing.T) []byte {
	t.Helper()
	cmd, err := fsm.Encode(fsm.OpPut, &pb.PutRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// grpcTarget is the member behind conn, reached over gRPC.
func grpcTarget(conn *grpc.ClientConn) proposalTarget {
	return proposalTarget{key: conn.Target(), open: func(context.Context, string) (frameConn, error) { return openGRPCFrames(conn) }}
}

func dialPeer(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestProposalStreamRoutesAnswers sends many commands at once over one
// stream and checks every caller gets its own answer: responses decoded,
// errors kept as the etcd errors clients match on.
func TestProposalStreamRoutesAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var unindexed atomic.Int32
	fakeLeader(t, ln, func(stream grpc.ServerStream, id uint64, cmd []byte) []byte {
		if md, _ := metadata.FromIncomingContext(stream.Context()); len(md.Get(indexedAnswersKey)) == 0 {
			unindexed.Add(1)
		}
		c, err := fsm.Decode(cmd)
		if err != nil {
			return encodeAnswer(id, nil, 0, err)
		}
		put := c.Msg.(*pb.PutRequest)
		if string(put.Value) == "refuse" {
			return encodeAnswer(id, nil, 0, rpctypes.ErrGRPCLeaseNotFound)
		}
		// The revision tells the caller which command this answers; odd
		// ones are answered as a leader of an earlier version answers,
		// without the index.
		var rev int64
		fmt.Sscanf(string(put.Key), "k%d", &rev)
		var index uint64
		if rev%2 == 0 {
			index = uint64(rev) + 1000
		}
		return encodeAnswer(id, &pb.PutResponse{Header: &pb.ResponseHeader{Revision: rev}}, index, nil)
	})
	conn := dialPeer(t, ln.Addr().String())
	var f proposalForwarder
	defer f.close()

	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			value := "v"
			if i%10 == 0 {
				value = "refuse"
			}
			cmd, err := fsm.Encode(fsm.OpPut, &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i), Value: []byte(value)})
			if err != nil {
				errs <- err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			body, index, err := f.propose(ctx, time.Second, grpcTarget(conn), cmd)
			if value == "refuse" {
				if !errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) {
					errs <- fmt.Errorf("command %d: got %v, want %v", i, err, rpctypes.ErrGRPCLeaseNotFound)
				}
				return
			}
			if err != nil {
				errs <- fmt.Errorf("command %d: %w", i, err)
				return
			}
			var resp pb.PutResponse
			if err := resp.Unmarshal(body); err != nil {
				errs <- err
				return
			}
			if resp.Header.Revision != int64(i) {
				errs <- fmt.Errorf("command %d got the answer to %d", i, resp.Header.Revision)
			}
			if want := uint64(i) + 1000; (i%2 == 0 && index != want) || (i%2 == 1 && index != 0) {
				errs <- fmt.Errorf("command %d: applied at %d", i, index)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := unindexed.Load(); n > 0 {
		t.Errorf("%d commands came on a stream that did not ask for indexed answers", n)
	}
}

// TestProposalStreamCutAfterSend: a command the leader received before the
// connection broke may have been applied, so it must not come back as "not
// sent" (which callers retry); a command that found no leader to send to
// must, and the next call opens a new stream.
func TestProposalStreamCutAfterSend(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &connTracker{Listener: inner}
	var got atomic.Int32
	fakeLeader(t, ln, func(grpc.ServerStream, uint64, []byte) []byte {
		got.Add(1)
		ln.cut()
		return nil
	})
	conn := dialPeer(t, ln.Addr().String())
	var f proposalForwarder
	defer f.close()
	cmd := putCommand(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = f.propose(ctx, time.Second, grpcTarget(conn), cmd)
	if got.Load() != 1 {
		t.Fatalf("the leader saw %d commands, want 1", got.Load())
	}
	if !errors.Is(err, server.ErrLeaderChanged) {
		t.Fatalf("a command cut off after the leader got it returned %v, want %v (its outcome is unknown)", err, server.ErrLeaderChanged)
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := dialPeer(t, closed.Addr().String())
	closed.Close()
	_, _, err = f.propose(ctx, time.Second, grpcTarget(gone), cmd)
	if !errors.Is(err, server.ErrNotSent) {
		t.Fatalf("a command that never left returned %v, want %v", err, server.ErrNotSent)
	}
}

func FuzzReadRecord(f *testing.F) {
	f.Add([]byte(appendRequest(nil, outgoing{id: 7, cmd: []byte("cmd")})), false)
	f.Add(encodeAnswer(3, nil, 0, rpctypes.ErrGRPCNotLeader), true)
	f.Add(encodeAnswer(4, &pb.PutResponse{}, 9, nil), true)
	f.Add([]byte{0xff, 0xff, 0xff}, false)
	f.Fuzz(func(t *testing.T, b []byte, withKind bool) {
		for len(b) > 0 {
			var kind byte
			kp := &kind
			if !withKind {
				kp = nil
			}
			_, body, rest, err := readRecord(b, kp)
			if err != nil {
				return
			}
			if len(rest) >= len(b) {
				t.Fatalf("no progress: %d bytes left of %d", len(rest), len(b))
			}
			if withKind {
				_ = decodeAnswer(kind, body)
			}
			b = rest
		}
	})
}

// TestProposalStreamRetired: a member that comes to lead drops its stream
// to the former leader (after grace), and forwards on a new one if it
// follows again.
func TestProposalStreamRetired(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{}, 2)
	fakeLeader(t, ln, func(stream grpc.ServerStream, id uint64, _ []byte) []byte {
		go func() {
			<-stream.Context().Done()
			ended <- struct{}{}
		}()
		return encodeAnswer(id, &pb.PutResponse{Header: &pb.ResponseHeader{}}, 0, nil)
	})
	conn := dialPeer(t, ln.Addr().String())
	var f proposalForwarder
	defer f.close()
	cmd := putCommand(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := f.propose(ctx, time.Second, grpcTarget(conn), cmd); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	first := f.stream
	f.mu.Unlock()
	f.retire(10 * time.Millisecond)
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the retired stream stayed open")
	}
	if _, _, err := f.propose(ctx, time.Second, grpcTarget(conn), cmd); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	second := f.stream
	f.mu.Unlock()
	if second == nil || second == first {
		t.Fatal("no new stream after the old one was retired")
	}
}

package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/server"
)

// connTracker remembers accepted connections so a test can reset them.
type connTracker struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *connTracker) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *connTracker) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		// A reset, as a proxy or a dying host gives, rather than an EOF.
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
}

// cuttingKV receives a Put, as a leader appends it, then loses the
// connection before it can answer.
type cuttingKV struct {
	pb.UnimplementedKVServer
	ln   *connTracker
	puts atomic.Int32
}

func (k *cuttingKV) Put(ctx context.Context, _ *pb.PutRequest) (*pb.PutResponse, error) {
	k.puts.Add(1)
	k.ln.cut()
	<-ctx.Done()
	return nil, ctx.Err()
}

func putOnce(t *testing.T, addr string) error {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pb.NewKVClient(conn).Put(ctx, &pb.PutRequest{Key: []byte("k")})
	if err == nil {
		t.Fatal("put succeeded")
	}
	return err
}

// TestPeerErrAfterConnectionLoss checks peerErr against the errors gRPC
// really returns: a write whose connection broke after the leader received
// it is Unreachable, which the request layer sends again only when
// idempotent (jepsen-lite saw forwarded puts applied three times), while
// one that never found a connection was not sent, and may be sent again.
func TestPeerErrAfterConnectionLoss(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &connTracker{Listener: inner}
	kv := &cuttingKV{ln: ln}
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, kv)
	go srv.Serve(ln)
	defer srv.Stop()

	err = putOnce(t, ln.Addr().String())
	if kv.puts.Load() != 1 {
		t.Fatalf("the server saw %d puts, want 1", kv.puts.Load())
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a cut connection gave %v, want Unavailable", err)
	}
	var u *server.Unreachable
	if perr := peerErr(err); !errors.As(perr, &u) || errors.Is(perr, server.ErrNotSent) {
		t.Fatalf("a write cut off after it was received is %v, want server.Unreachable", perr)
	}
	if st := status.Convert(mapErr(context.Background(), peerErr(err))); st.Code() != codes.Unavailable {
		t.Fatalf("the client of a write cut off hears %v, want what the connection said", st)
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	err = putOnce(t, addr)
	if perr := peerErr(err); !errors.Is(perr, server.ErrNotSent) {
		t.Fatalf("a write that never connected is %v, want server.ErrNotSent", perr)
	}
}

package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// A proposal stream travels one of two ways. Between members of this
// version it has a peer connection of its own (streamPropose): frames as
//
//	uvarint length | frame
//
// written by the goroutine that has them to send and read by one reader on
// each side. A forwarded write through gRPC's HTTP/2 stream cost four more
// hand-offs between goroutines (gRPC's writer on each side, its reader and
// the stream's receiver on each side) and HTTP/2's framing and flow
// control, for a stream that needs neither: one write's round trip from a
// follower to the leader and back. A leader of an earlier version does not
// know the connection's first byte and closes it; the follower then uses
// /corenode.Peer/Propose on the peer gRPC server, as before, and tries its
// own connection again a minute later.
//
// A follower also asks the leader's read index (a linearizable read, its
// readiness at start) on this connection when it opened it as
// streamProposeReads, which a leader of an earlier version closes too (the
// follower then opens a streamPropose one, and asks read indexes by
// /corenode.Peer/ReadIndex). So members of this version send one another no
// HTTP/2 request for a write or a read, as etcd's members send none: Go's
// HTTP/2 debug log (GODEBUG=http2debug=2) on a member shows the requests
// of its clients, with the :authority they sent, which etcd 3.7's
// TestAuthority reads.

// frameConn is one proposal stream.
//
// Concurrency: send is called by one goroutine at a time (a frameBatcher's),
// recv by one goroutine, close by any, any number of times; close makes
// send and recv fail.
type frameConn interface {
	send(f frame) error
	recv(f *frame) error
	close()
}

const (
	// proposeHello is the leader's first byte on a proposal connection: the
	// follower sends nothing before it, so a command never goes to a member
	// that does not know the stream.
	proposeHello byte = 1
	// rawWriteTimeout bounds one frame's write: a leader that reads nothing
	// for this long has its stream broken, and the commands on it are
	// answered as their state says (ErrNotSent, or unknown).
	rawWriteTimeout = 10 * time.Second
	// legacyRetry is how long a follower keeps using gRPC for a leader that
	// closed its proposal connection unanswered (an earlier version's).
	legacyRetry = time.Minute
)

// errNoProposalConns says the member closed a proposal connection without
// its hello: it runs an earlier version.
var errNoProposalConns = errors.New("transport: the member does not take proposal connections")

// rawFrames is a proposal stream on its own peer connection.
type rawFrames struct {
	c    net.Conn
	r    *bufio.Reader
	wbuf []byte // send's, reused: sends take turns
	once sync.Once
	// reads is set on a follower's connection opened as
	// streamProposeReads: the leader answers read-index records on it.
	reads bool
}

// takesReads reports whether the leader answers read-index records here.
func (r *rawFrames) takesReads() bool { return r.reads }

func newRawFrames(c net.Conn) *rawFrames {
	return &rawFrames{c: c, r: bufio.NewReaderSize(c, 64<<10)}
}

func (r *rawFrames) send(f frame) error {
	r.wbuf = binary.AppendUvarint(r.wbuf[:0], uint64(len(f)))
	r.wbuf = append(r.wbuf, f...)
	if err := r.c.SetWriteDeadline(time.Now().Add(rawWriteTimeout)); err != nil {
		return err
	}
	// One write, so a frame goes out in one system call (and, on a TLS
	// connection, one record).
	_, err := r.c.Write(r.wbuf)
	if cap(r.wbuf) > maxFrameBytes {
		r.wbuf = nil // one large command does not pin its buffer
	}
	return err
}

func (r *rawFrames) recv(f *frame) error {
	n, err := binary.ReadUvarint(r.r)
	if err != nil {
		return err
	}
	if n > maxMsgSize {
		return fmt.Errorf("transport: proposal frame of %d bytes, over the limit of %d", n, maxMsgSize)
	}
	if uint64(cap(*f)) < n {
		*f = make(frame, n)
	}
	*f = (*f)[:n]
	_, err = io.ReadFull(r.r, *f)
	return err
}

func (r *rawFrames) close() { r.once.Do(func() { r.c.Close() }) }

// dialRawFrames opens a proposal connection of kind (streamPropose or
// streamProposeReads) to the member at addr and waits for its hello,
// within ctx.
func dialRawFrames(ctx context.Context, peers *PeerMux, addr string, kind byte) (*rawFrames, error) {
	c, err := peers.dial(ctx, addr, kind)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(d)
	}
	rf := newRawFrames(c)
	b, err := rf.r.ReadByte()
	if err != nil || b != proposeHello {
		c.Close()
		if err == nil || errors.Is(err, io.EOF) || isReset(err) {
			return nil, errNoProposalConns
		}
		return nil, err
	}
	_ = c.SetReadDeadline(time.Time{})
	rf.reads = kind == streamProposeReads
	return rf, nil
}

// isReset reports whether err is the peer resetting the connection, which
// is how a member that drops an unknown stream may answer as well as EOF.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// grpcClientFrames is a follower's proposal stream over gRPC, for a leader
// of an earlier version.
type grpcClientFrames struct {
	cs     grpc.ClientStream
	cancel context.CancelFunc
}

// openGRPCFrames opens /corenode.Peer/Propose on conn, asking for indexed
// answers.
func openGRPCFrames(conn *grpc.ClientConn) (*grpcClientFrames, error) {
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), forwardedKey, "1", indexedAnswersKey, "1"))
	cs, err := conn.NewStream(ctx, &proposeStreamDesc, "/corenode.Peer/Propose", grpc.CallContentSubtype(frameCodecName))
	if err != nil {
		cancel()
		return nil, err
	}
	return &grpcClientFrames{cs: cs, cancel: cancel}, nil
}

func (g *grpcClientFrames) send(f frame) error  { return g.cs.SendMsg(&f) }
func (g *grpcClientFrames) recv(f *frame) error { return g.cs.RecvMsg(f) }
func (g *grpcClientFrames) close()              { g.cancel() }

// grpcServerFrames is the leader's side of a proposal stream over gRPC.
// close is the handler's return.
type grpcServerFrames struct{ ss grpc.ServerStream }

func (g grpcServerFrames) send(f frame) error  { return g.ss.SendMsg(&f) }
func (g grpcServerFrames) recv(f *frame) error { return g.ss.RecvMsg(f) }
func (g grpcServerFrames) close()              {}

package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/fsm"
)

// Followers forward writes to the leader over one stream per leader
// (/corenode.Peer/Propose) rather than one unary call each: a unary call
// costs both members a new HTTP/2 stream, its headers and trailers, and a
// goroutine, which measured here made a write through a follower cost
// about twice the CPU of one sent to the leader. On the stream, writes
// that wait together travel together in one frame, and so do answers.
//
// A request frame is a sequence of records
//
//	uvarint id | uvarint length | command (fsm.Encode)
//
// and an answer frame a sequence of
//
//	uvarint id | kind | uvarint length | body
//
// where kind answerOK carries the FSM's response, marshalled, and
// answerErr a gRPC status: uvarint code, then the message.
const (
	answerOK  byte = 0
	answerErr byte = 1

	// maxFrameBytes bounds the records gathered into one frame; a single
	// record may exceed it (a request is bounded by --max-request-bytes).
	maxFrameBytes = 1 << 20
)

// frame is a message of the peer port's framed streams, sent as is.
type frame []byte

// frameCodec passes frames through gRPC untouched: their records are
// already encoded, and a protobuf wrapper would only copy them again.
type frameCodec struct{}

const frameCodecName = "corenode-frame"

func init() { encoding.RegisterCodec(frameCodec{}) }

func (frameCodec) Marshal(v any) ([]byte, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("transport: frame codec cannot marshal %T", v)
	}
	return *f, nil
}

func (frameCodec) Unmarshal(data []byte, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("transport: frame codec cannot unmarshal into %T", v)
	}
	// gRPC may reuse data once this returns.
	*f = append((*f)[:0], data...)
	return nil
}

func (frameCodec) Name() string { return frameCodecName }

var proposeStreamDesc = grpc.StreamDesc{StreamName: "Propose", ServerStreams: true, ClientStreams: true}

// readRecord splits the first "uvarint id | uvarint length | body" record
// off b; kind, when not nil, reads a kind byte between id and length.
func readRecord(b []byte, kind *byte) (id uint64, body, rest []byte, err error) {
	id, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, nil, errors.New("transport: bad record id")
	}
	b = b[n:]
	if kind != nil {
		if len(b) == 0 {
			return 0, nil, nil, errors.New("transport: record without kind")
		}
		*kind, b = b[0], b[1:]
	}
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return 0, nil, nil, errors.New("transport: bad record length")
	}
	b = b[n:]
	return id, b[:l], b[l:], nil
}

// serveProposals is the leader's side of a follower's proposal stream: every
// command is proposed as it arrives, and answers go back as they come,
// gathered into frames.
func (s *Server) serveProposals(stream grpc.ServerStream) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	answers := make(chan []byte, 1024)
	sendErr := make(chan error, 1)
	go func() {
		for {
			buf, ok := nextFrame(ctx, answers, func(buf frame, a []byte) frame { return append(buf, a...) })
			if !ok {
				return
			}
			if err := stream.SendMsg(&buf); err != nil {
				sendErr <- err
				cancel()
				return
			}
		}
	}()
	var in frame
	for {
		if err := stream.RecvMsg(&in); err != nil {
			select {
			case err := <-sendErr:
				return err
			default:
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		for b := []byte(in); len(b) > 0; {
			id, cmd, rest, err := readRecord(b, nil)
			if err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
			b = rest
			cmd = append([]byte(nil), cmd...) // in is reused by the next RecvMsg
			go func() {
				// A proposal's wait is bounded by raft (its enqueue timeout,
				// and a leader without quorum steps down), not by ctx.
				resp, err := s.node.ProposeEncoded(ctx, cmd)
				a := encodeAnswer(id, resp, mapErr(ctx, err))
				select {
				case answers <- a:
				case <-ctx.Done():
				}
			}()
		}
	}
}

func encodeAnswer(id uint64, resp any, err error) []byte {
	a := binary.AppendUvarint(nil, id)
	if err == nil {
		m, ok := resp.(fsm.Message)
		if !ok {
			err = fmt.Errorf("transport: applied with %T, which cannot be sent", resp)
		} else if body, merr := m.Marshal(); merr != nil {
			err = fmt.Errorf("transport: marshal answer: %w", merr)
		} else {
			a = append(a, answerOK)
			a = binary.AppendUvarint(a, uint64(len(body)))
			return append(a, body...)
		}
	}
	st, _ := status.FromError(mapErr(context.Background(), err))
	body := binary.AppendUvarint(nil, uint64(st.Code()))
	body = append(body, st.Message()...)
	a = append(a, answerErr)
	a = binary.AppendUvarint(a, uint64(len(body)))
	return append(a, body...)
}

func decodeAnswerErr(body []byte) error {
	code, n := binary.Uvarint(body)
	if n <= 0 {
		return status.Error(codes.Internal, "transport: bad error answer from the leader")
	}
	return status.Error(codes.Code(code), string(body[n:]))
}

// proposalAnswer is the leader's answer to one forwarded command: the
// response body, or an error.
type proposalAnswer struct {
	body []byte
	err  error
}

// errNotSent fails a forwarded command that never left this member: it
// may be sent again without being applied twice.
var errNotSent = rpctypes.ErrGRPCNotLeader

// proposalForwarder is a follower's side: one stream to the current leader,
// commands multiplexed on it by id.
type proposalForwarder struct {
	mu     sync.Mutex
	conn   *grpc.ClientConn
	stream *proposalStream
	closed bool
	// open mirrors stream != nil, so the leader's write path can tell
	// without the lock that it has nothing to retire.
	open atomic.Bool
}

type proposalStream struct {
	cs     grpc.ClientStream
	cancel context.CancelFunc
	out    chan outgoing

	mu      sync.Mutex
	next    uint64
	waiters map[uint64]*proposalWaiter
	broken  bool
}

type outgoing struct {
	id  uint64
	cmd []byte
}

type proposalWaiter struct {
	ch chan proposalAnswer // buffered: an answer never blocks the receiver
	// sent is set once the command was handed to the stream: from then on
	// a broken stream leaves its outcome unknown. Guarded by the stream's mu.
	sent bool
}

// propose sends cmd to the leader over conn and returns the leader's
// answer. changed is closed when this member sees the leader change; the
// call then waits at most grace longer and returns errLeaderChanged, as a
// unary forward does. A command that never left returns errNotSent.
func (f *proposalForwarder) propose(ctx context.Context, changed <-chan struct{}, grace time.Duration, conn *grpc.ClientConn, cmd []byte) ([]byte, error) {
	st, err := f.streamTo(conn, grace)
	if err != nil {
		return nil, errNotSent
	}
	id, w, ok := st.add()
	if !ok {
		return nil, errNotSent
	}
	var a proposalAnswer
	select {
	case st.out <- outgoing{id: id, cmd: cmd}:
	case a = <-w.ch: // the stream broke first
		return a.body, a.err
	case <-ctx.Done():
		st.drop(id)
		return nil, ctx.Err()
	}
	a, _, err = await(ctx, changed, grace, w.ch)
	if err != nil {
		st.drop(id)
		return nil, err
	}
	return a.body, a.err
}

// streamTo returns the stream to conn's member, opening it, and retiring a
// stream to an earlier leader after grace (its calls may still be
// answered meanwhile).
func (f *proposalForwarder) streamTo(conn *grpc.ClientConn, grace time.Duration) (*proposalStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errors.New("transport: server closed")
	}
	if f.conn == conn && f.stream != nil && !f.stream.isBroken() {
		return f.stream, nil
	}
	f.retireLocked(grace)
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), forwardedKey, "1"))
	cs, err := conn.NewStream(ctx, &proposeStreamDesc, "/corenode.Peer/Propose", grpc.CallContentSubtype(frameCodecName))
	if err != nil {
		cancel()
		return nil, err
	}
	st := &proposalStream{cs: cs, cancel: cancel, out: make(chan outgoing, 1024), waiters: map[uint64]*proposalWaiter{}}
	go st.send(ctx)
	go st.receive()
	f.conn, f.stream = conn, st
	f.open.Store(true)
	return st, nil
}

// retire drops the stream to a former leader once this member leads
// itself; calls still waiting on it get grace to be answered.
func (f *proposalForwarder) retire(grace time.Duration) {
	if !f.open.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retireLocked(grace)
}

func (f *proposalForwarder) retireLocked(grace time.Duration) {
	if old := f.stream; old != nil {
		time.AfterFunc(grace, old.cancel)
	}
	f.conn, f.stream = nil, nil
	f.open.Store(false)
}

func (f *proposalForwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.stream != nil {
		f.stream.cancel()
		f.stream = nil
	}
	f.open.Store(false)
}

func (st *proposalStream) isBroken() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.broken
}

func (st *proposalStream) add() (uint64, *proposalWaiter, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.broken {
		return 0, nil, false
	}
	st.next++
	w := &proposalWaiter{ch: make(chan proposalAnswer, 1)}
	st.waiters[st.next] = w
	return st.next, w, true
}

func (st *proposalStream) drop(id uint64) {
	st.mu.Lock()
	delete(st.waiters, id)
	st.mu.Unlock()
}

// send gathers waiting commands into frames.
func (st *proposalStream) send(ctx context.Context) {
	var ids []uint64
	for {
		ids = ids[:0]
		buf, ok := nextFrame(ctx, st.out, func(buf frame, o outgoing) frame {
			ids = append(ids, o.id)
			return appendRequest(buf, o)
		})
		if !ok {
			st.fail()
			return
		}
		st.mu.Lock()
		for _, id := range ids {
			if w := st.waiters[id]; w != nil {
				w.sent = true
			}
		}
		st.mu.Unlock()
		if err := st.cs.SendMsg(&buf); err != nil {
			st.cancel()
			st.fail()
			return
		}
	}
}

// nextFrame waits for one item on ch and adds it, and whatever else is
// already waiting (up to maxFrameBytes), to a new frame: gRPC may still
// hold the last frame after SendMsg returns, so frames are never reused.
// ok is false once ctx ends.
func nextFrame[T any](ctx context.Context, ch <-chan T, add func(frame, T) frame) (buf frame, ok bool) {
	select {
	case v := <-ch:
		buf = add(nil, v)
	case <-ctx.Done():
		return nil, false
	}
	for len(buf) < maxFrameBytes {
		select {
		case v := <-ch:
			buf = add(buf, v)
		default:
			return buf, true
		}
	}
	return buf, true
}

func appendRequest(buf frame, o outgoing) frame {
	buf = binary.AppendUvarint(buf, o.id)
	buf = binary.AppendUvarint(buf, uint64(len(o.cmd)))
	return append(buf, o.cmd...)
}

// receive routes answers to their waiters until the stream ends.
func (st *proposalStream) receive() {
	defer st.fail()
	var in frame
	for {
		if err := st.cs.RecvMsg(&in); err != nil {
			st.cancel()
			return
		}
		for b := []byte(in); len(b) > 0; {
			var kind byte
			id, body, rest, err := readRecord(b, &kind)
			if err != nil {
				st.cancel()
				return
			}
			b = rest
			a := proposalAnswer{}
			if kind == answerOK {
				a.body = append([]byte(nil), body...) // in is reused
			} else {
				a.err = decodeAnswerErr(body)
			}
			st.mu.Lock()
			w := st.waiters[id]
			delete(st.waiters, id)
			st.mu.Unlock()
			if w != nil {
				w.ch <- a
			}
		}
	}
}

// fail ends the stream for every waiter: a command still queued here may
// be sent again; one handed to the stream may have been applied.
func (st *proposalStream) fail() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.broken {
		return
	}
	st.broken = true
	for id, w := range st.waiters {
		err := errNotSent
		if w.sent {
			err = errLeaderChanged
		}
		w.ch <- proposalAnswer{err: err}
		delete(st.waiters, id)
	}
}

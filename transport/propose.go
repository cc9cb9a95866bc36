package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/server"
)

// Followers forward writes to the leader over one stream per leader
// (/corenode.Peer/Propose) rather than one unary call each: a unary call
// costs both members a new HTTP/2 stream, its headers and trailers, and a
// goroutine, which measured here made a write through a follower cost
// about twice the CPU of one sent to the leader. On the stream, writes
// that wait together travel together in one frame, and so do answers; one
// that travels alone is sent by its own goroutine (frameBatcher).
//
// A request frame is a sequence of records
//
//	uvarint id | uvarint length | command (fsm.Encode)
//
// and an answer frame a sequence of
//
//	uvarint id | kind | uvarint length | body
//
// where kind answerOK carries the FSM's response, marshalled, answerErr a
// gRPC status (uvarint code, then the message), and answerApplied the
// command's log index, then the response:
//
//	uvarint index | response
//
// A request with an empty command asks the leader's read index (only on a
// proposal connection opened as streamProposeReads); its answer is
// answerApplied with the read index and an empty response.
//
// A follower answers its client only once it has applied that index too,
// as etcd answers a write only once the member serving it applied it, so a
// serializable read there right after sees the write. Only a follower that
// opened the stream with indexedAnswersKey gets answerApplied; a member of
// an earlier version, which reads any kind it does not know as an error,
// gets answerOK.
const (
	answerOK      byte = 0
	answerErr     byte = 1
	answerApplied byte = 2

	indexedAnswersKey = "corenode-indexed-answers"

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

// serveProposals is the leader's side of a follower's proposal stream over
// gRPC, which a follower of an earlier version opens (proposeconn.go).
func (s *Server) serveProposals(stream grpc.ServerStream) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	indexed := len(md.Get(indexedAnswersKey)) > 0
	return s.serveProposalFrames(stream.Context(), grpcServerFrames{stream}, indexed)
}

// ServeProposalConns serves the followers' proposal connections that ln
// yields, until ln is closed. The connections it accepted stay open until
// Close (or until their follower closes them), so a leader shutting down
// still answers the writes it took while it hands leadership over, as its
// peer gRPC server does.
func (s *Server) ServeProposalConns(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("transport: accept a proposal connection: %w", err)
		}
		go func() {
			rf := newRawFrames(c)
			stop := context.AfterFunc(s.done, rf.close)
			defer stop()
			defer rf.close()
			if _, err := c.Write([]byte{proposeHello}); err != nil {
				return
			}
			if err := s.serveProposalFrames(s.done, rf, true); err != nil && !errors.Is(err, io.EOF) && s.done.Err() == nil {
				s.log.Debug("proposal connection ended", "remote", c.RemoteAddr(), "err", err)
			}
		}()
	}
}

// serveProposalFrames is the leader's side of a follower's proposal
// stream: every command is proposed as it arrives, on a goroutine of its
// own, and its answer goes back from there as it comes, gathered into a
// frame with the answers that wait with it (frameBatcher). indexed says
// the follower reads answerApplied. It returns when the stream ends.
func (s *Server) serveProposalFrames(ctx context.Context, fc frameConn, indexed bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sendErr := make(chan error, 1)
	answers := frameBatcher{send: func(buf frame, _ []uint64) error {
		if err := ctx.Err(); err != nil {
			return err // the stream ended: it takes no more
		}
		if err := fc.send(buf); err != nil {
			sendErr <- err
			cancel()
			fc.close()
			return err
		}
		return nil
	}}
	var in frame
	for {
		if err := fc.recv(&in); err != nil {
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
			if len(cmd) == 0 && indexed {
				// A read-index question (streamProposeReads): no command
				// is ever empty.
				go func() {
					index, err := s.req.ReadIndex(ctx)
					_ = answers.add(id, encodeAnswer(id, emptyAnswer{}, index, mapErr(ctx, err)))
				}()
				continue
			}
			cmd = append([]byte(nil), cmd...) // in is reused by the next recv
			go func() {
				// A proposal's wait is bounded by raft (its enqueue timeout,
				// and a leader without quorum steps down), not by ctx.
				resp, index, err := s.req.ProposeForwarded(ctx, cmd)
				if !indexed {
					index = 0
				}
				// A failed send ends the stream: the follower hears of it.
				_ = answers.add(id, encodeAnswer(id, resp, index, mapErr(ctx, err)))
			}()
		}
	}
}

// emptyAnswer is the response to a read-index question: the answer's
// index is all it says.
type emptyAnswer struct{}

func (emptyAnswer) Marshal() ([]byte, error) { return nil, nil }
func (emptyAnswer) Unmarshal([]byte) error   { return nil }
func (emptyAnswer) Size() int                { return 0 }

// encodeAnswer encodes the answer to command id: answerApplied when index
// is not 0, else answerOK, or answerErr when err is not nil.
func encodeAnswer(id uint64, resp any, index uint64, err error) []byte {
	a := binary.AppendUvarint(nil, id)
	if err == nil {
		m, ok := resp.(server.Message)
		if !ok {
			err = fmt.Errorf("transport: applied with %T, which cannot be sent", resp)
		} else if body, merr := m.Marshal(); merr != nil {
			err = fmt.Errorf("transport: marshal answer: %w", merr)
		} else {
			var head [binary.MaxVarintLen64]byte
			n, kind := 0, answerOK
			if index != 0 {
				n, kind = binary.PutUvarint(head[:], index), answerApplied
			}
			a = append(a, kind)
			a = binary.AppendUvarint(a, uint64(n+len(body)))
			a = append(a, head[:n]...)
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

// decodeAnswer reads one answer record's body. body is copied, as the
// frame it came in is reused.
func decodeAnswer(kind byte, body []byte) proposalAnswer {
	switch kind {
	case answerOK:
		return proposalAnswer{body: append([]byte(nil), body...)}
	case answerApplied:
		index, n := binary.Uvarint(body)
		if n <= 0 {
			return proposalAnswer{err: status.Error(codes.Internal, "transport: bad applied answer from the leader")}
		}
		return proposalAnswer{body: append([]byte(nil), body[n:]...), index: index}
	case answerErr:
		return proposalAnswer{err: decodeAnswerErr(body)}
	}
	return proposalAnswer{err: status.Errorf(codes.Internal, "transport: answer of unknown kind %d from the leader", kind)}
}

func decodeAnswerErr(body []byte) error {
	code, n := binary.Uvarint(body)
	if n <= 0 {
		return status.Error(codes.Internal, "transport: bad error answer from the leader")
	}
	return status.Error(codes.Code(code), string(body[n:]))
}

// proposalAnswer is the leader's answer to one forwarded command: the
// response body and the index it applied at (0: not said), or an error.
type proposalAnswer struct {
	body  []byte
	index uint64
	err   error
}

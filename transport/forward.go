package transport

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"reflect"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/fsm"
)

// Forwarding: a member that does not lead passes writes, linearizable
// reads' index questions and leader-only calls to the leader's peer port
// (onLeader), one hop per attempt, and retries them on a new leader only
// when that cannot apply them twice (retryable).

// leaderConn returns a connection to the current leader's peer port,
// waiting a little for an election to finish.
func (s *Server) leaderConn(ctx context.Context) (*grpc.ClientConn, error) {
	for {
		changed := s.node.LeaderChange()
		id, addr := s.node.Leader()
		if id == s.node.ID() && s.node.IsLeader() {
			return nil, nil
		}
		if addr != "" && id != s.node.ID() {
			return s.peerConn(addr)
		}
		select {
		case <-ctx.Done():
			return nil, rpctypes.ErrGRPCNoLeader
		case <-changed:
		}
	}
}

func (s *Server) peerConn(addr string) (*grpc.ClientConn, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if c, ok := s.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return s.peers.DialGRPC(ctx, a)
		}),
		// A forwarded request is bounded by --max-request-bytes; its answer
		// (a Txn's ranges) by nothing, as a client's answer is not.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(maxMsgSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("transport: connect to leader %s: %w", addr, err)
	}
	s.conns[addr] = c
	return c, nil
}

// maxMsgSize bounds gRPC messages; request size proper is checked against
// --max-request-bytes so clients get etcd's error rather than gRPC's.
const maxMsgSize = 64 << 20

// remoteCall runs a request on the leader, whose peer port conn reaches.
// changed is closed when this member sees the leader change: the call then
// gives the old leader grace to answer and returns errLeaderChanged.
type remoteCall[T any] func(ctx context.Context, changed <-chan struct{}, conn *grpc.ClientConn) (T, error)

// unary is the remoteCall of a unary gRPC call, marked as forwarded.
func unary[T any](s *Server, call func(context.Context, *grpc.ClientConn) (T, error)) remoteCall[T] {
	return func(ctx context.Context, changed <-chan struct{}, conn *grpc.ClientConn) (T, error) {
		return forward(ctx, changed, s.grace, conn, call)
	}
}

// onLeader runs local on this member if it leads, else forwards with remote
// to the leader, retrying while leadership moves and the deadline allows.
// A forwarded call is abandoned when the leader changes (see
// node.LeaderChange); idempotent calls are then sent to the new leader, the
// others fail with etcd's "leader changed", as their outcome is unknown.
func onLeader[T any](s *Server, ctx context.Context, idempotent bool,
	local func(context.Context) (T, error),
	remote remoteCall[T],
) (T, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var zero T
	for attempt := 0; ; attempt++ {
		if s.node.IsLeader() {
			resp, err := local(ctx)
			if !notLeader(err) {
				return resp, mapErr(ctx, err)
			}
		}
		if isForwarded(ctx) {
			// The sender retries against whoever leads now.
			return zero, rpctypes.ErrGRPCNotLeader
		}
		changed, ready := s.node.LeaderChange(), s.node.ReadyChange()
		conn, err := s.leaderConn(ctx)
		if err != nil {
			return zero, err
		}
		if conn == nil {
			// This member leads but could not serve yet (a fresh leader
			// before its barrier): try again once it is ready, or once
			// leadership moved.
			if s.node.Ready() {
				continue
			}
			select {
			case <-ctx.Done():
				return zero, mapErr(ctx, ctx.Err())
			case <-ready:
			case <-changed:
			}
			continue
		}
		resp, err := remote(ctx, changed, conn)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return zero, mapErr(ctx, ctx.Err())
		}
		if errors.Is(err, errLeaderChanged) {
			if !idempotent {
				return zero, rpctypes.ErrGRPCLeaderChanged
			}
		} else if !retryable(err, idempotent) {
			return zero, mapErr(ctx, err)
		}
		select {
		case <-ctx.Done():
			return zero, mapErr(ctx, ctx.Err())
		case <-time.After(time.Duration(min(attempt+1, 10)) * 20 * time.Millisecond):
		}
	}
}

var errLeaderChanged = errors.New("transport: leader changed during a forwarded call")

// await waits for an answer on ch, or until ctx ends, or until grace after
// changed (the leader changed) closes: errLeaderChanged. ok is false when
// ch was closed instead.
func await[T any](ctx context.Context, changed <-chan struct{}, grace time.Duration, ch <-chan T) (v T, ok bool, err error) {
	var expired <-chan time.Time
	for {
		select {
		case v, ok = <-ch:
			return v, ok, nil
		case <-ctx.Done():
			return v, false, ctx.Err()
		case <-changed:
			changed = nil
			t := time.NewTimer(grace)
			defer t.Stop()
			expired = t.C
		case <-expired:
			return v, false, errLeaderChanged
		}
	}
}

// forward runs remote against the leader's connection, marked as forwarded,
// until it returns, or until grace after the leader changed: an old leader
// that handed over answers within milliseconds, one that vanished with its
// host never answers, and its connection may not fail for minutes.
func forward[T any](ctx context.Context, changed <-chan struct{}, grace time.Duration, conn *grpc.ClientConn,
	remote func(context.Context, *grpc.ClientConn) (T, error),
) (T, error) {
	rctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, forwardedKey, "1"))
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-changed:
		case <-stop:
			return
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-stop:
		}
	}()
	resp, err := remote(rctx, conn)
	if err != nil && rctx.Err() != nil && ctx.Err() == nil {
		var zero T
		return zero, errLeaderChanged
	}
	return resp, err
}

// retryable reports whether a failed forward may be sent again: always for
// an idempotent call, and for the others only when the request certainly
// did not reach a leader's log, so a second send cannot apply it twice. A
// reset or EOF on an open connection proves nothing: the leader may have
// appended the request before the connection broke.
func retryable(err error, idempotent bool) bool {
	if errors.Is(err, rpctypes.ErrGRPCNotLeader) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	if st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), "not leader") {
		return true
	}
	if st.Code() != codes.Unavailable {
		return false
	}
	// gRPC fails a call on a connection it could not establish with the
	// dial or handshake error; such a call was never written anywhere.
	msg := strings.ToLower(st.Message())
	return idempotent || strings.Contains(msg, "while dialing") || strings.Contains(msg, "handshake failed")
}

// propose is the write path shared by every mutating RPC: the leader
// proposes msg itself; a follower encodes it once and forwards it over its
// proposal stream (see proposalForwarder). T is the FSM's response to op.
func propose[T fsm.Message](s *Server, ctx context.Context, op fsm.Op, msg fsm.Message) (T, error) {
	var zero T
	if msg.Size() > s.limits.MaxRequestBytes {
		return zero, rpctypes.ErrGRPCRequestTooLarge
	}
	if s.node.FSM().OverQuota(op, msg, s.limits.QuotaBackendBytes) {
		s.raiseNoSpace(ctx)
		return zero, rpctypes.ErrGRPCNoSpace
	}
	// Once auth is enabled, a client's write carries who it acts for, and
	// is checked where it applies (see auth.go).
	as, err := s.as(ctx)
	if err != nil {
		return zero, err
	}
	var cmd []byte
	encode := func() error {
		if cmd != nil {
			return nil
		}
		var err error
		if as != nil && op != fsm.OpAuth {
			cmd, err = fsm.EncodeAs(op, msg, as)
		} else {
			cmd, err = fsm.Encode(op, msg)
		}
		return err
	}
	return onLeader(s, ctx, false, func(ctx context.Context) (T, error) {
		s.proposals.retire(s.grace)
		var resp any
		var err error
		if as == nil {
			resp, err = s.node.Propose(ctx, op, msg)
		} else if err = encode(); err == nil {
			resp, _, err = s.node.ProposeEncoded(ctx, cmd)
		}
		if err != nil {
			return zero, err
		}
		t, ok := resp.(T)
		if !ok {
			return zero, fmt.Errorf("transport: %s applied with %T", op, resp)
		}
		return t, nil
	}, func(ctx context.Context, changed <-chan struct{}, conn *grpc.ClientConn) (T, error) {
		if err := encode(); err != nil {
			return zero, err
		}
		body, index, err := s.proposals.propose(ctx, changed, s.grace, conn, cmd)
		if err != nil {
			return zero, err
		}
		t := reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
		if err := t.Unmarshal(body); err != nil {
			return zero, fmt.Errorf("transport: %s: leader's answer: %w", op, err)
		}
		// Answer once this member applied the write too (see
		// answerApplied). A member that falls behind for longer answers
		// "request timed out", as etcd does; the write is committed.
		if err := s.node.AwaitApplied(ctx, index); err != nil {
			return zero, err
		}
		return t, nil
	})
}

// linearizable runs read on this member's state once that state includes
// every write acknowledged, or applied anywhere, before the call: the member
// gets a read index (node.ReadIndex; a follower asks the leader for it) and
// waits until its FSM has applied that far. The read itself never leaves
// the member, and concurrent reads share the round trips.
func linearizable[T any](s *Server, ctx context.Context, read func() (T, error)) (T, error) {
	var zero T
	return onLeader(s, ctx, true, func(ctx context.Context) (T, error) {
		index, err := s.node.ReadIndex(ctx)
		if err != nil {
			return zero, err
		}
		if err := s.node.FSM().WaitApplied(ctx, index); err != nil {
			return zero, err
		}
		return read()
	}, func(ctx context.Context, _ <-chan struct{}, _ *grpc.ClientConn) (T, error) {
		index, err := s.readIndex(ctx)
		if err != nil {
			return zero, err
		}
		if err := s.node.FSM().WaitApplied(ctx, index); err != nil {
			return zero, mapErr(ctx, err)
		}
		return read()
	})
}

// readIndex returns an index that covers every write acknowledged before
// the call. Concurrent callers share one round trip to the leader, joining
// only a round not yet sent (one already in flight may have been answered
// by a leader that was deposed before this call began).
func (s *Server) readIndex(ctx context.Context) (uint64, error) {
	return s.indexRounds.Do(ctx)
}

func (s *Server) askReadIndex() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout)
	defer cancel()
	changed := s.node.LeaderChange()
	conn, err := s.leaderConn(ctx)
	if err != nil {
		return 0, err
	}
	if conn == nil {
		return 0, rpctypes.ErrGRPCNotLeader // this member leads now; the caller retries locally
	}
	resp, err := forward(ctx, changed, s.grace, conn, func(ctx context.Context, conn *grpc.ClientConn) (*pb.StatusResponse, error) {
		var resp pb.StatusResponse
		err := conn.Invoke(ctx, "/corenode.Peer/ReadIndex", &pb.StatusRequest{}, &resp)
		return &resp, err
	})
	if errors.Is(err, errLeaderChanged) {
		return 0, rpctypes.ErrGRPCNotLeader // retryable: the caller asks again
	}
	if err != nil {
		return 0, err
	}
	return resp.RaftAppliedIndex, nil
}

// requireLeader serves clientv3.WithRequireLeader, as etcd does: a stream
// whose client asked for a leader is refused with ErrGRPCNoLeader when this
// member has none, and the returned channel is closed once the member has
// been without a leader for an election timeout, so the client moves to a
// member that can hear the cluster instead of waiting on one cut off from
// it. For other streams the channel is nil (never closed).
func (s *Server) requireLeader(ctx context.Context) (<-chan struct{}, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(rpctypes.MetadataRequireLeaderKey); len(v) == 0 || v[0] != rpctypes.MetadataHasLeader {
		return nil, nil
	}
	if id, _ := s.node.Leader(); id == 0 {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	lost := make(chan struct{})
	go func() {
		for {
			// Taken before the leader is looked at, so no change is missed.
			changed := s.node.LeaderChange()
			if id, _ := s.node.Leader(); id == 0 {
				t := time.NewTimer(s.grace)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-changed:
					t.Stop()
					continue
				case <-t.C:
				}
				if id, _ := s.node.Leader(); id == 0 {
					close(lost)
					return
				}
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return lost, nil
}

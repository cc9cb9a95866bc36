package server

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/lessor"
)

// The write pipeline: every request that changes state goes through
// Propose, whichever service it came from. In order:
//
//  1. size: the request, as it would be sent, is at most
//     --max-request-bytes (ErrRequestTooLarge);
//  2. quota: a write that adds data while the store is over
//     --quota-backend-bytes is refused and raises the NOSPACE alarm
//     through raft, once (fsm.ErrNoSpace);
//  3. identity: while auth is enabled, a client's write carries who it
//     acts for, and is checked where it applies, on every member alike;
//  4. encode once: the command is encoded at most once, however often it
//     is sent;
//  5. propose on the leader, or forward to it (OnLeader: a write is not
//     idempotent, so it is sent again only when it certainly never reached
//     a leader's log);
//  6. answer once applied here: a follower waits until it has applied the
//     write's index too, so a serializable read on it right after sees the
//     write, as etcd answers a write only once the member serving it
//     applied it.

// Message is a request or a response the log carries (fsm.Message).
type Message = fsm.Message

// ErrRequestTooLarge refuses a write larger than --max-request-bytes.
var ErrRequestTooLarge = fmt.Errorf("server: request is too large")

// Propose runs msg, a request of op, through the write pipeline and
// returns the state machine's response, a *R, once applied on this member
// (R names the response type: Propose[pb.PutResponse](...)).
func Propose[R any, T interface {
	*R
	fsm.Message
}](s *Server, ctx context.Context, op fsm.Op, msg fsm.Message) (T, error) {
	resp, err := s.propose(ctx, op, msg, func() fsm.Message { return T(new(R)) })
	if err != nil {
		return nil, err
	}
	t, ok := resp.(T)
	if !ok {
		return nil, fmt.Errorf("server: %s applied with %T", op, resp)
	}
	return t, nil
}

// propose is the write pipeline (see the top of this file); newResp
// returns an empty response of op's type, for the leader's answer to a
// forwarded write to be read into.
func (s *Server) propose(ctx context.Context, op fsm.Op, msg fsm.Message, newResp func() fsm.Message) (fsm.Message, error) {
	if msg.Size() > s.limits.MaxRequestBytes {
		return nil, ErrRequestTooLarge
	}
	if s.node.FSM().OverQuota(op, msg, s.limits.QuotaBackendBytes) {
		s.raiseNoSpace(ctx)
		return nil, fsm.ErrNoSpace
	}
	as, err := s.As(ctx)
	if err != nil {
		return nil, err
	}
	cmd := fsm.Command{Op: op, Msg: msg}
	if as != nil && op != fsm.OpAuth {
		// An auth request carries who asks in its own header.
		cmd.As = as
	}
	var data []byte
	encode := func() (err error) {
		if data == nil {
			data, err = cmd.Encode()
		}
		return err
	}
	return OnLeader(s, ctx, false, func(ctx context.Context) (fsm.Message, error) {
		s.peers.Retire()
		if err := encode(); err != nil {
			return nil, err
		}
		// The leader hands its gate the request as it is, decoded.
		resp, _, err := s.node.ProposeCommand(ctx, cmd, data)
		if err != nil {
			return nil, err
		}
		m, ok := resp.(fsm.Message)
		if !ok {
			return nil, fmt.Errorf("server: %s applied with %T", op, resp)
		}
		return m, nil
	}, func(ctx context.Context, leader string) (fsm.Message, error) {
		if err := encode(); err != nil {
			return nil, err
		}
		body, index, err := s.peers.Propose(ctx, leader, data)
		if err != nil {
			return nil, err
		}
		m := newResp()
		if err := m.Unmarshal(body); err != nil {
			return nil, fmt.Errorf("server: %s: leader's answer: %w", op, err)
		}
		// A member that falls behind for longer answers "request timed
		// out", as etcd does; the write is committed.
		if err := s.node.AwaitApplied(ctx, index); err != nil {
			return nil, err
		}
		return m, nil
	})
}

// ProposeForwarded proposes a command another member forwarded (encoded
// by its Propose) and returns the response and the index it applied at.
// Only the leader accepts it; anything else answers ErrNotLeader, and the
// sender tries again wherever the leader is now.
func (s *Server) ProposeForwarded(ctx context.Context, cmd []byte) (resp any, index uint64, err error) {
	return s.node.ProposeEncoded(ctx, cmd)
}

// As returns the header an OpAs entry carries for ctx's caller, or nil when
// the write needs none.
func (s *Server) As(ctx context.Context) (*pb.RequestHeader, error) {
	ai, checked, err := s.callers.Caller(ctx)
	if err != nil || !checked {
		return nil, err
	}
	return &pb.RequestHeader{Username: ai.User, AuthRevision: ai.Revision}, nil
}

// RaiseAlarm raises an alarm of type t for member id through raft and
// returns once it has applied here.
func (s *Server) RaiseAlarm(ctx context.Context, id uint64, t pb.AlarmType) error {
	req := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: t}
	_, err := Propose[pb.AlarmResponse](s, ctx, fsm.OpAlarm, req)
	return err
}

// raiseNoSpace raises this member's NOSPACE alarm, once: a write refused
// for the quota tells every member to refuse writes that add data.
func (s *Server) raiseNoSpace(ctx context.Context) {
	f := s.node.FSM()
	if f.HasAlarm(0, pb.AlarmType_NOSPACE) {
		return
	}
	s.log.Warn("space quota exceeded: raising the NOSPACE alarm", "state-bytes", f.Store().Size(), "quota-bytes", s.limits.QuotaBackendBytes)
	if err := s.RaiseAlarm(ctx, s.node.ID(), pb.AlarmType_NOSPACE); err != nil {
		s.log.Warn("raising the NOSPACE alarm failed; the next refused write tries again", "err", err)
	}
}

// LeaseProposer is what the lessor replicates grants and revokes through:
// the write pipeline.
func (s *Server) LeaseProposer() lessor.Proposer { return leaseProposer{s} }

type leaseProposer struct{ s *Server }

func (p leaseProposer) ProposeGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return Propose[pb.LeaseGrantResponse](p.s, ctx, fsm.OpLeaseGrant, r)
}

func (p leaseProposer) ProposeRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return Propose[pb.LeaseRevokeResponse](p.s, ctx, fsm.OpLeaseRevoke, r)
}

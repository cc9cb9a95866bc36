package server

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/node"
)

// Cluster is the membership API the edge serves. Each answer lists the
// members; the edge adds the header. Safe for concurrent use.
type Cluster interface {
	MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error)
	MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error)
	MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error)
	MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error)
	MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error)
}

var _ Cluster = (*Server)(nil)

// MemberList answers from this member's configuration, after a read index
// when the request asks for a linearizable list (clientv3 3.6 does by
// default; etcdctl 3.4 does not, and is answered even without a quorum).
func (s *Server) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	list := s.node.Members
	if r.Linearizable {
		list = func() ([]*pb.Member, error) { return s.members(ctx) }
	}
	ms, err := list()
	if err != nil {
		return nil, err
	}
	return &pb.MemberListResponse{Members: ms}, nil
}

// MemberAdd adds a member on the leader (node.AddMember: etcd's strict
// reconfiguration check, a voter staged until it caught up).
func (s *Server) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	added, err := OnLeader(s, ctx, false, func(ctx context.Context) (*pb.Member, error) {
		return s.node.AddMember(ctx, r.PeerURLs, r.IsLearner)
	}, func(ctx context.Context, leader string) (*pb.Member, error) {
		var resp pb.MemberAddResponse
		if err := s.peers.Call(ctx, leader, "/etcdserverpb.Cluster/MemberAdd", r, &resp); err != nil {
			return nil, err
		}
		return resp.Member, nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberAddResponse{Member: added, Members: s.membersAfterChange(ctx)}, nil
}

// MemberRemove removes a member on the leader, and tells the member, so it
// stops rather than campaign forever.
func (s *Server) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	ms, err := s.node.Members()
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(ms, func(m *pb.Member) bool { return m.ID == r.ID })
	if i < 0 {
		return nil, node.ErrMemberNotFound
	}
	removed := ms[i]
	_, err = OnLeader(s, ctx, false, func(ctx context.Context) (struct{}, error) {
		if err := s.node.RemoveMember(ctx, r.ID); err != nil {
			return struct{}{}, err
		}
		if addr, err := PeerAddr(removed.PeerURLs); err == nil && r.ID != s.node.ID() {
			go s.tellRemoved(r.ID, addr)
		}
		return struct{}{}, nil
	}, func(ctx context.Context, leader string) (struct{}, error) {
		return struct{}{}, s.peers.Call(ctx, leader, "/etcdserverpb.Cluster/MemberRemove", r, new(pb.MemberRemoveResponse))
	})
	if err != nil {
		return nil, err
	}
	if r.ID == s.node.ID() {
		// This member left: it has no leader to ask any more, and stops
		// once this answer is out (a linearizable list would wait for a
		// leader until the member's stop cut the call off). As etcd's,
		// the answer is its last view.
		ms, _ := s.node.Members()
		return &pb.MemberRemoveResponse{Members: ms}, nil
	}
	return &pb.MemberRemoveResponse{Members: s.membersAfterChange(ctx)}, nil
}

// MemberUpdate changes a member's peer URLs on the leader.
func (s *Server) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	_, err := OnLeader(s, ctx, false, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.node.UpdateMember(ctx, r.ID, r.PeerURLs)
	}, func(ctx context.Context, leader string) (struct{}, error) {
		return struct{}{}, s.peers.Call(ctx, leader, "/etcdserverpb.Cluster/MemberUpdate", r, new(pb.MemberUpdateResponse))
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberUpdateResponse{Members: s.membersAfterChange(ctx)}, nil
}

// MemberPromote makes a learner a voter on the leader.
func (s *Server) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	_, err := OnLeader(s, ctx, false, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.node.PromoteMember(ctx, r.ID)
	}, func(ctx context.Context, leader string) (struct{}, error) {
		return struct{}{}, s.peers.Call(ctx, leader, "/etcdserverpb.Cluster/MemberPromote", r, new(pb.MemberPromoteResponse))
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberPromoteResponse{Members: s.membersAfterChange(ctx)}, nil
}

// membersAfterChange lists the members for the answer to a membership
// change that succeeded. The change is committed, so this must not fail the
// call: a leader that removed itself has no leader to ask any more, and
// then the local list serves.
func (s *Server) membersAfterChange(ctx context.Context) []*pb.Member {
	if !s.callers.Forwarded(ctx) {
		if ms, err := s.members(ctx); err == nil {
			return ms
		}
	}
	ms, _ := s.node.Members()
	return ms
}

// Members lists the members once this member has applied every
// configuration change committed before the call.
func (s *Server) Members(ctx context.Context) ([]*pb.Member, error) { return s.members(ctx) }

func (s *Server) members(ctx context.Context) ([]*pb.Member, error) {
	return Linearizable(s, ctx, s.node.Members)
}

// tellRemoved lets a removed member know, so it stops rather than campaign
// forever: the leader stops replicating to it, so it may never see its own
// removal. Best effort; it also notices when it applies the configuration.
func (s *Server) tellRemoved(id uint64, addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.peers.Call(ctx, addr, "/corenode.Peer/Removed", &pb.Member{ID: id}, new(pb.MemberUpdateResponse)); err != nil {
		s.log.Info("could not tell a removed member", "id", fmt.Sprintf("%x", id), "err", err)
	}
}

// Removed is this member's answer to the leader that removed member id:
// if that is this member, it stops.
func (s *Server) Removed(id uint64) error {
	if id != s.node.ID() {
		return node.ErrMemberNotFound
	}
	s.node.MarkRemoved("the leader said so")
	return nil
}

// PeerAddr is the raft address (host:port) of a member's peer URLs.
func PeerAddr(urls []string) (string, error) {
	if len(urls) == 0 {
		return "", node.ErrBadPeerURLs
	}
	u, err := url.Parse(urls[0])
	if err != nil || u.Host == "" || u.Port() == "" {
		return "", node.ErrBadPeerURLs
	}
	return u.Host, nil
}

// PublishSelf records this member's name and URLs in the replicated member
// table, retrying until it succeeds or ctx ends, as etcd members publish
// their attributes once they join. It returns nil once the table holds
// them, ctx's error if ctx ended first.
func (s *Server) PublishSelf(ctx context.Context) error {
	self := s.node.Self()
	for {
		if cur := s.node.FSM().Member(self.ID); cur != nil && published(cur, self) {
			if !slices.Equal(cur.PeerURLs, self.PeerURLs) {
				s.log.Warn("the cluster reaches this member at other peer URLs than it advertises (etcdctl member update changed them); "+
					"restart it with --initial-advertise-peer-urls set to them", "cluster", cur.PeerURLs, "advertised", self.PeerURLs)
			}
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := Propose[pb.Member](s, cctx, fsm.OpPublish, self)
		cancel()
		if err == nil {
			s.log.Info("published member attributes", "name", self.Name, "client-urls", self.ClientURLs)
			return nil
		}
		s.log.Debug("publish failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// published reports whether the cluster's record cur holds what self
// publishes: its name and client URLs, and some peer URLs (the cluster's
// own, if it recorded them when it added the member).
func published(cur, self *pb.Member) bool {
	return cur.Name == self.Name && slices.Equal(cur.ClientURLs, self.ClientURLs) && len(cur.PeerURLs) > 0
}

package server

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/etcddb"
	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
)

// APIVersion is the etcd API version corenode reports in Status; clients
// gate features on it.
const APIVersion = "3.6.0"

// ClusterVersion is APIVersion as etcd names a cluster's version:
// MAJOR.MINOR.
const ClusterVersion = "3.6"

// Maintenance is the maintenance API the edge serves; the edge adds the
// header and streams the snapshot. Safe for concurrent use.
type Maintenance interface {
	Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error)
	Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error)
	Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error)
	HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error)
	// Snapshot returns this member's state as etcd's backend file; the
	// caller closes it.
	Snapshot(ctx context.Context) (*etcddb.File, error)
	MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error)
	Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error)
}

var _ Maintenance = (*Server)(nil)

var (
	// ErrSnapshot is a snapshot this member failed to take.
	ErrSnapshot = errors.New("server: snapshot failed")
	// ErrDowngradeVersionFormat refuses a downgrade target that is no
	// version (etcd's ErrWrongDowngradeVersionFormat).
	ErrDowngradeVersionFormat = errors.New("server: wrong downgrade target version format")
	// ErrDowngradeTarget refuses a downgrade target corenode cannot go
	// down to: any (etcd's ErrInvalidDowngradeTargetVersion).
	ErrDowngradeTarget = errors.New("server: invalid downgrade target version")
	// ErrUnknownMethod refuses an action the API does not have.
	ErrUnknownMethod = errors.New("server: unknown method")
)

// Alarm lists the raised alarms (GET, answered once this member has
// applied everything committed before the call) or raises or clears one
// through raft, as etcd does; `etcdctl alarm disarm` clears each listed
// alarm.
func (s *Server) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	if r.Action != pb.AlarmRequest_GET {
		return Propose[pb.AlarmResponse](s, ctx, fsm.OpAlarm, r)
	}
	alarms, err := Linearizable(s, ctx, func() ([]*pb.AlarmMember, error) { return s.node.FSM().Alarms(), nil })
	if err != nil {
		return nil, err
	}
	resp := &pb.AlarmResponse{}
	for _, a := range alarms {
		if r.MemberID == 0 || r.MemberID == a.MemberID {
			resp.Alarms = append(resp.Alarms, a)
		}
	}
	return resp, nil
}

// Status is this member's view of itself and the cluster.
func (s *Server) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	n := s.node
	rf := n.Raft()
	leader, _ := n.Leader()
	// The FSM is ahead of raft's own applied index after the replay at
	// start (node/replay.go), and raft's commit index is zero until a
	// leader names one; what was applied was committed.
	applied := max(rf.AppliedIndex(), n.FSM().Applied())
	resp := &pb.StatusResponse{
		Version:          APIVersion,
		Leader:           leader,
		RaftIndex:        max(rf.CommitIndex(), applied),
		RaftTerm:         rf.CurrentTerm(),
		RaftAppliedIndex: applied,
		DbSize:           n.DiskSize(),
		DbSizeInUse:      n.DiskSize(),
		DbSizeQuota:      max(s.limits.QuotaBackendBytes, 0),
		StorageVersion:   APIVersion,
		IsLearner:        n.IsLearner(),
	}
	if leader == 0 {
		resp.Errors = append(resp.Errors, "etcdserver: no leader")
	}
	// Status answers while the member catches up (an operator asks why it
	// serves nothing else), so it says that its state is not yet all it
	// had: the header's revision is what the member replayed at start
	// (every revision it answered before a crash, node/replay.go), not
	// necessarily the cluster's.
	select {
	case <-n.CaughtUp():
	default:
		resp.Errors = append(resp.Errors, fmt.Sprintf("etcdserver: catching up with the cluster since start (applied index %d)", applied))
	}
	for _, a := range n.FSM().Alarms() {
		resp.Errors = append(resp.Errors, a.String())
	}
	if rf.State() == raft.Shutdown {
		resp.Errors = append(resp.Errors, "etcdserver: server stopped")
	}
	return resp, nil
}

// Hash is the hash of this member's whole state; the header's revision is
// the one it was taken at.
func (s *Server) Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	h, rev, err := s.node.FSM().Hash()
	if err != nil {
		return nil, err
	}
	return &pb.HashResponse{Header: &pb.ResponseHeader{Revision: rev}, Hash: h}, nil
}

// HashKV answers from this member's own state, as etcd's does, so that
// `etcdctl endpoint hashkv --cluster` compares the members.
func (s *Server) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	h, err := s.node.Store().HashKV(r.Revision)
	if err != nil {
		return nil, err
	}
	return &pb.HashKVResponse{Hash: h.Hash, CompactRevision: h.CompactRevision, HashRevision: h.Revision}, nil
}

// PeerHashKV asks member id for its hash of the key space at rev (the
// corruption check compares the members').
func (s *Server) PeerHashKV(ctx context.Context, id uint64, rev int64) (kv.KVHash, error) {
	addr, err := s.peerAddrOf(id)
	if err != nil {
		return kv.KVHash{}, err
	}
	var resp pb.HashKVResponse
	if err := s.peers.Call(ctx, addr, "/etcdserverpb.Maintenance/HashKV", &pb.HashKVRequest{Revision: rev}, &resp); err != nil {
		return kv.KVHash{}, err
	}
	return kv.KVHash{Hash: resp.Hash, Revision: resp.HashRevision, CompactRevision: resp.CompactRevision}, nil
}

// Applied is this member's applied index, then its revision: read in this
// order, the revision is at least the one the index produced, so a peer
// that reports an index at or past another member's and a revision below
// that member's at it holds another history (package integrity).
func (s *Server) Applied() (uint64, int64) {
	index := s.node.FSM().Applied()
	return index, s.node.Store().Rev()
}

// PeerApplied asks member id for its Applied.
func (s *Server) PeerApplied(ctx context.Context, id uint64) (uint64, int64, error) {
	addr, err := s.peerAddrOf(id)
	if err != nil {
		return 0, 0, err
	}
	var resp pb.StatusResponse
	if err := s.peers.Call(ctx, addr, "/corenode.Peer/Applied", &pb.StatusRequest{}, &resp); err != nil {
		return 0, 0, err
	}
	return resp.RaftAppliedIndex, resp.GetHeader().GetRevision(), nil
}

// peerAddrOf is member id's peer address.
func (s *Server) peerAddrOf(id uint64) (string, error) {
	members, err := s.node.Members()
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(members, func(m *pb.Member) bool { return m.ID == id && len(m.PeerURLs) > 0 })
	if i < 0 {
		return "", fmt.Errorf("server: member %x has no peer URL", id)
	}
	addr, err := PeerAddr(members[i].PeerURLs)
	if err != nil {
		return "", fmt.Errorf("server: member %x peer URL: %w", id, err)
	}
	return addr, nil
}

// Snapshot is this member's state as etcd's backend file. As etcd, the
// member asked answers from its own state, so a save costs the leader
// nothing; unlike etcd's, that state is taken once it holds every write
// acknowledged before the call (a read index, as for a linearizable
// read), never a lagging one.
func (s *Server) Snapshot(ctx context.Context) (*etcddb.File, error) {
	if s.Corrupt() {
		return nil, ErrCorrupt
	}
	return Linearizable(s, ctx, func() (*etcddb.File, error) {
		f, err := s.node.ExportSnapshot(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Error("snapshot for client failed", "err", err)
			return nil, fmt.Errorf("%w: %w", ErrSnapshot, err)
		}
		return f, err
	})
}

// MoveLeader hands leadership to member r.TargetID, on the leader.
func (s *Server) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	_, err := OnLeader(s, ctx, false, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.node.TransferLeadership(r.TargetID)
	}, func(ctx context.Context, leader string) (struct{}, error) {
		return struct{}{}, s.peers.Call(ctx, leader, "/etcdserverpb.Maintenance/MoveLeader", r, new(pb.MoveLeaderResponse))
	})
	if err != nil {
		return nil, err
	}
	return &pb.MoveLeaderResponse{}, nil
}

// Downgrade answers as etcd answers for a version it cannot go down to:
// corenode keeps one storage format and no older corenode reads a newer
// one's log (see docs/operations.md, "Upgrades"), so no target is valid
// and no downgrade is ever in flight. A malformed target gets etcd's
// format error first, as etcd checks the format first; a cancel with
// nothing to cancel succeeds with the cluster version, as etcd 3.6's does.
func (s *Server) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	switch r.Action {
	case pb.DowngradeRequest_VALIDATE, pb.DowngradeRequest_ENABLE:
		if !downgradeTarget.MatchString(r.Version) {
			return nil, ErrDowngradeVersionFormat
		}
		return nil, ErrDowngradeTarget
	case pb.DowngradeRequest_CANCEL:
		return &pb.DowngradeResponse{Version: ClusterVersion}, nil
	}
	return nil, ErrUnknownMethod
}

// downgradeTarget is the form etcd takes a downgrade target in: a cluster
// version, MAJOR.MINOR, with an optional .PATCH.
var downgradeTarget = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)

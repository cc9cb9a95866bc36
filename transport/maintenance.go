package transport

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"net/url"
	"regexp"
	"slices"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/etcddb"
	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/server"
)

// APIVersion is the etcd API version corenode reports in Status; clients
// gate features on it.
const APIVersion = "3.6.0"

// clusterVersion is APIVersion as etcd names a cluster's version:
// MAJOR.MINOR.
const clusterVersion = "3.6"

type maintenanceService struct{ s *Server }

// Alarm lists the raised alarms (GET, answered once this member has applied
// everything committed before the call) or raises or clears one through
// raft, as etcd does; `etcdctl alarm disarm` clears each listed alarm.
func (m *maintenanceService) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	if r.Action != pb.AlarmRequest_GET {
		resp, err := server.Propose[pb.AlarmResponse](m.s.req, ctx, fsm.OpAlarm, r)
		if err != nil {
			return nil, mapErr(ctx, err)
		}
		resp.Header = m.s.header(resp.Header)
		return resp, nil
	}
	alarms, err := server.Linearizable(m.s.req, ctx, func() ([]*pb.AlarmMember, error) { return m.s.node.FSM().Alarms(), nil })
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp := &pb.AlarmResponse{Header: m.s.header(nil)}
	for _, a := range alarms {
		if r.MemberID == 0 || r.MemberID == a.MemberID {
			resp.Alarms = append(resp.Alarms, a)
		}
	}
	return resp, nil
}

// RaiseAlarm raises an alarm of type t for member id through raft and
// returns once it has applied here.
func (s *Server) RaiseAlarm(ctx context.Context, id uint64, t pb.AlarmType) error {
	return s.req.RaiseAlarm(ctx, id, t)
}

// PeerHashKV asks member id, over the peer port, for its hash of the key
// space at rev (see Maintenance.HashKV).
func (s *Server) PeerHashKV(ctx context.Context, id uint64, rev int64) (kv.KVHash, error) {
	members, err := s.node.Members()
	if err != nil {
		return kv.KVHash{}, err
	}
	i := slices.IndexFunc(members, func(m *pb.Member) bool { return m.ID == id && len(m.PeerURLs) > 0 })
	if i < 0 {
		return kv.KVHash{}, fmt.Errorf("transport: member %x has no peer URL", id)
	}
	u, err := url.Parse(members[i].PeerURLs[0])
	if err != nil {
		return kv.KVHash{}, fmt.Errorf("transport: member %x peer URL: %w", id, err)
	}
	conn, err := s.peers.Conn(u.Host)
	if err != nil {
		return kv.KVHash{}, err
	}
	resp, err := pb.NewMaintenanceClient(conn).HashKV(ctx, &pb.HashKVRequest{Revision: rev})
	if err != nil {
		return kv.KVHash{}, err
	}
	return kv.KVHash{Hash: resp.Hash, Revision: resp.HashRevision, CompactRevision: resp.CompactRevision}, nil
}

func (m *maintenanceService) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	n := m.s.node
	rf := n.Raft()
	leader, _ := n.Leader()
	resp := &pb.StatusResponse{
		Header:           m.s.header(nil),
		Version:          APIVersion,
		Leader:           leader,
		RaftIndex:        rf.CommitIndex(),
		RaftTerm:         rf.CurrentTerm(),
		RaftAppliedIndex: rf.AppliedIndex(),
		DbSize:           n.DiskSize(),
		DbSizeInUse:      n.DiskSize(),
		DbSizeQuota:      max(m.s.req.Limits().QuotaBackendBytes, 0),
		StorageVersion:   APIVersion,
		IsLearner:        n.IsLearner(),
	}
	if leader == 0 {
		resp.Errors = append(resp.Errors, "etcdserver: no leader")
	}
	for _, a := range n.FSM().Alarms() {
		resp.Errors = append(resp.Errors, a.String())
	}
	if rf.State() == raft.Shutdown {
		resp.Errors = append(resp.Errors, "etcdserver: server stopped")
	}
	return resp, nil
}

func (m *maintenanceService) Defragment(ctx context.Context, r *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	// Nothing to defragment: state is in memory and raft's log shrinks at
	// each snapshot. Succeed so tools that defragment routinely keep working.
	return &pb.DefragmentResponse{Header: m.s.header(nil)}, nil
}

func (m *maintenanceService) Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	h, rev, err := m.s.node.FSM().Hash()
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	return &pb.HashResponse{Header: m.s.header(&pb.ResponseHeader{Revision: rev}), Hash: h}, nil
}

// HashKV answers from this member's own state, as etcd's does, so that
// `etcdctl endpoint hashkv --cluster` compares the members.
func (m *maintenanceService) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	store := m.s.node.Store()
	h, err := store.HashKV(r.Revision)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	return &pb.HashKVResponse{Header: m.s.header(nil), Hash: h.Hash, CompactRevision: h.CompactRevision, HashRevision: h.Revision}, nil
}

// Snapshot streams this member's state as etcd's backend file, followed by
// its SHA-256 as etcd appends one: what `etcdctl snapshot save` stores is a
// file that `etcdutl snapshot status` and `restore` take, and that
// `corenode snapshot restore` takes too. As etcd, the member asked answers
// from its own state, so a save costs the leader nothing; unlike etcd's,
// that state is taken once it holds every write acknowledged before the
// call (a read index, as for a linearizable read), never a lagging one.
func (m *maintenanceService) Snapshot(r *pb.SnapshotRequest, srv pb.Maintenance_SnapshotServer) error {
	ctx := srv.Context()
	if m.s.req.Corrupt() {
		return rpctypes.ErrGRPCCorrupt
	}
	file, err := server.Linearizable(m.s.req, ctx, func() (*etcddb.File, error) {
		f, err := m.s.node.ExportSnapshot(ctx)
		if err != nil && ctx.Err() == nil {
			m.s.log.Error("snapshot for client failed", "err", err)
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return f, err
	})
	if err != nil {
		return mapErr(ctx, err)
	}
	defer file.Close()
	// As etcd: RemainingBytes counts the file's bytes still to come, the
	// SHA-256 goes last on its own with zero remaining, and every message
	// carries the header and the storage version.
	out := &snapshotSender{srv: srv, remaining: file.Size(), header: m.s.header(nil), h: sha256.New()}
	w := bufio.NewWriterSize(out, 64<<10)
	if _, err := file.WriteTo(w); err != nil {
		return snapshotErr(err)
	}
	if err := w.Flush(); err != nil {
		return snapshotErr(err)
	}
	return srv.Send(&pb.SnapshotResponse{Header: out.header, Blob: out.h.Sum(nil), Version: APIVersion})
}

// snapshotSender sends what is written to it as one SnapshotResponse per
// write, and hashes it.
type snapshotSender struct {
	srv       pb.Maintenance_SnapshotServer
	remaining int64
	header    *pb.ResponseHeader
	h         hash.Hash
}

func (s *snapshotSender) Write(b []byte) (int, error) {
	s.h.Write(b)
	s.remaining -= int64(len(b))
	if err := s.srv.Send(&pb.SnapshotResponse{Header: s.header, RemainingBytes: uint64(max(s.remaining, 0)), Blob: b, Version: APIVersion}); err != nil {
		return 0, sendErr{err}
	}
	return len(b), nil
}

// sendErr marks an error of the stream, returned as it is, from one of
// reading the file.
type sendErr struct{ error }

func snapshotErr(err error) error {
	var se sendErr
	if errors.As(err, &se) {
		return se.error
	}
	return status.Errorf(codes.Internal, "corenode: read the snapshot file: %v", err)
}

func (m *maintenanceService) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	_, err := server.OnLeader(m.s.req, ctx, false, func(ctx context.Context) (*pb.MoveLeaderResponse, error) {
		return nil, m.s.node.TransferLeadership(r.TargetID)
	}, remote(m.s, func(ctx context.Context, c *grpc.ClientConn) (*pb.MoveLeaderResponse, error) {
		return pb.NewMaintenanceClient(c).MoveLeader(ctx, r)
	}))
	if err != nil {
		return nil, err
	}
	return &pb.MoveLeaderResponse{Header: m.s.header(nil)}, nil
}

// Downgrade answers as etcd answers for a version it cannot go down to:
// corenode keeps one storage format and no older corenode reads a newer
// one's log (see docs/operations.md, "Upgrades"), so no target is valid
// and no downgrade is ever in flight. A malformed target gets etcd's
// format error first, as etcd checks the format first; a cancel with
// nothing to cancel succeeds with the cluster version, as etcd 3.6's does.
func (m *maintenanceService) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	switch r.Action {
	case pb.DowngradeRequest_VALIDATE, pb.DowngradeRequest_ENABLE:
		if !downgradeTarget.MatchString(r.Version) {
			return nil, rpctypes.ErrGRPCWrongDowngradeVersionFormat
		}
		return nil, rpctypes.ErrGRPCInvalidDowngradeTargetVersion
	case pb.DowngradeRequest_CANCEL:
		return &pb.DowngradeResponse{Header: m.s.header(nil), Version: clusterVersion}, nil
	}
	return nil, status.Error(codes.InvalidArgument, "etcdserver: unknown method")
}

// downgradeTarget is the form etcd takes a downgrade target in: a cluster
// version, MAJOR.MINOR, with an optional .PATCH.
var downgradeTarget = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)

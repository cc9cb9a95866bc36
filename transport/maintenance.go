package transport

import (
	"context"
	"crypto/sha256"
	"io"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// APIVersion is the etcd API version corenode reports in Status; clients
// gate features on it.
const APIVersion = "3.6.0"

type maintenanceService struct{ s *Server }

func (m *maintenanceService) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	// corenode raises no alarms: its state lives in memory and its log is
	// truncated by snapshots, so there is no database quota to exceed.
	return &pb.AlarmResponse{Header: m.s.header(nil)}, nil
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
		IsLearner:        false,
	}
	if leader == 0 {
		resp.Errors = append(resp.Errors, "etcdserver: no leader")
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
	return nil, status.Error(codes.Unimplemented, "corenode: Hash is not implemented")
}

func (m *maintenanceService) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	return nil, status.Error(codes.Unimplemented, "corenode: HashKV is not implemented")
}

// Snapshot streams the leader's state, taken after a leadership check so it
// holds every write acknowledged before the call (etcd streams the state of
// the member asked, which may lag), followed by its SHA-256 as etcd appends
// one, so `corenode snapshot restore` can tell a truncated or damaged file.
// A follower relays the leader's stream. The bytes are corenode's snapshot
// format, not a bbolt database: restore them with corenode, not etcdutl.
func (m *maintenanceService) Snapshot(r *pb.SnapshotRequest, srv pb.Maintenance_SnapshotServer) error {
	ctx := srv.Context()
	if !m.s.node.IsLeader() {
		if isForwarded(ctx) {
			return rpctypes.ErrGRPCNotLeader
		}
		conn, err := m.s.leaderConn(ctx)
		if err != nil {
			return err
		}
		if conn != nil {
			return relaySnapshot(metadata.AppendToOutgoingContext(ctx, forwardedKey, "1"), conn, r, srv)
		}
	}
	if err := m.s.node.ReadBarrier(ctx); err != nil {
		return mapErr(ctx, err)
	}
	meta, rc, err := m.s.node.OpenSnapshot()
	if err != nil {
		m.s.log.Error("snapshot for client failed", "err", err)
		return status.Error(codes.Unavailable, err.Error())
	}
	defer rc.Close()
	h := sha256.New()
	// etcdctl accepts a download only if its length is a multiple of 512
	// plus the 32-byte hash, as a bbolt file's would be; zeros pad the
	// body, and restore ignores what follows the snapshot's end.
	pad := (512 - meta.Size%512) % 512
	remaining := uint64(meta.Size+pad) + sha256.Size
	buf := make([]byte, 64<<10)
	first := true
	send := func(b []byte) error {
		remaining -= uint64(len(b))
		resp := &pb.SnapshotResponse{RemainingBytes: remaining, Blob: b}
		if first {
			resp.Header, resp.Version, first = m.s.header(nil), APIVersion, false
		}
		return srv.Send(resp)
	}
	for sent := int64(0); sent < meta.Size; {
		n, err := io.ReadFull(rc, buf[:min(int64(len(buf)), meta.Size-sent)])
		if err != nil {
			return status.Errorf(codes.Internal, "corenode: read snapshot %s: %v", meta.ID, err)
		}
		h.Write(buf[:n])
		if err := send(buf[:n]); err != nil {
			return err
		}
		sent += int64(n)
	}
	if pad > 0 {
		zeros := make([]byte, pad)
		h.Write(zeros)
		if err := send(zeros); err != nil {
			return err
		}
	}
	return send(h.Sum(nil))
}

func (m *maintenanceService) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	_, err := onLeader(m.s, ctx, false, func(ctx context.Context) (*pb.MoveLeaderResponse, error) {
		return nil, m.s.node.TransferLeadership(r.TargetID)
	}, unary(m.s, func(ctx context.Context, c *grpc.ClientConn) (*pb.MoveLeaderResponse, error) {
		return pb.NewMaintenanceClient(c).MoveLeader(ctx, r)
	}))
	if err != nil {
		return nil, err
	}
	return &pb.MoveLeaderResponse{Header: m.s.header(nil)}, nil
}

func (m *maintenanceService) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, status.Error(codes.Unimplemented, "corenode: Downgrade is not supported")
}

func relaySnapshot(ctx context.Context, conn *grpc.ClientConn, r *pb.SnapshotRequest, srv pb.Maintenance_SnapshotServer) error {
	stream, err := pb.NewMaintenanceClient(conn).Snapshot(ctx, r)
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := srv.Send(resp); err != nil {
			return err
		}
	}
}

package transport

import (
	"context"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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

func (m *maintenanceService) Snapshot(r *pb.SnapshotRequest, srv pb.Maintenance_SnapshotServer) error {
	return status.Error(codes.Unimplemented, "corenode: Snapshot is not implemented yet")
}

func (m *maintenanceService) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	_, err := onLeader(m.s, ctx, func(ctx context.Context) (*pb.MoveLeaderResponse, error) {
		return nil, m.s.node.TransferLeadership(r.TargetID)
	}, func(ctx context.Context, c *grpc.ClientConn) (*pb.MoveLeaderResponse, error) {
		return pb.NewMaintenanceClient(c).MoveLeader(ctx, r)
	})
	if err != nil {
		return nil, err
	}
	return &pb.MoveLeaderResponse{Header: m.s.header(nil)}, nil
}

func (m *maintenanceService) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, status.Error(codes.Unimplemented, "corenode: Downgrade is not supported")
}

package transport

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"hash"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/server"
)

// APIVersion is the etcd API version corenode reports; clients gate
// features on it.
const APIVersion = server.APIVersion

// maintenanceService is the Maintenance service's edge over the request
// layer (server.Maintenance).
type maintenanceService struct{ s *Server }

func (m *maintenanceService) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	resp, err := m.s.maintenance.Alarm(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = m.s.header(resp.Header)
	return resp, nil
}

func (m *maintenanceService) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	resp, err := m.s.maintenance.Status(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = m.s.header(nil)
	return resp, nil
}

func (m *maintenanceService) Defragment(ctx context.Context, r *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	// Nothing to defragment: state is in memory and raft's log shrinks at
	// each snapshot. Succeed so tools that defragment routinely keep working.
	return &pb.DefragmentResponse{Header: m.s.header(nil)}, nil
}

func (m *maintenanceService) Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	resp, err := m.s.maintenance.Hash(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = m.s.header(resp.Header)
	return resp, nil
}

func (m *maintenanceService) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	resp, err := m.s.maintenance.HashKV(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = m.s.header(nil)
	return resp, nil
}

// Snapshot streams the request layer's snapshot file, followed by its
// SHA-256 as etcd appends one: what `etcdctl snapshot save` stores is a
// file that `etcdutl snapshot status` and `restore` take, and that
// `corenode snapshot restore` takes too.
func (m *maintenanceService) Snapshot(r *pb.SnapshotRequest, srv pb.Maintenance_SnapshotServer) error {
	ctx := srv.Context()
	file, err := m.s.maintenance.Snapshot(ctx)
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
	resp, err := m.s.maintenance.MoveLeader(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = m.s.header(nil)
	return resp, nil
}

func (m *maintenanceService) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	resp, err := m.s.maintenance.Downgrade(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp.Header = m.s.header(nil)
	return resp, nil
}

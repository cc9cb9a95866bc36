package server

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
)

// KV is the key-value API the edge serves, as etcd's RaftKV: each call
// validates its request, checks the caller's permission, and reads or
// writes through the pipeline. Errors are those of the layers below, for
// the edge's one table to map. Safe for concurrent use.
type KV interface {
	Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error)
	Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error)
	DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error)
	Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error)
	Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error)
}

var _ KV = (*Server)(nil)

// ErrCorrupt refuses reads on a member the corruption check named.
var ErrCorrupt = errors.New("server: this member's state is corrupt")

// Range reads keys: linearizable unless the request asks for a
// serializable read, which this member answers from its own state.
func (s *Server) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := kv.CheckRange(r); err != nil {
		return nil, err
	}
	if s.Corrupt() {
		return nil, ErrCorrupt
	}
	read := func() (*pb.RangeResponse, error) {
		if err := s.AuthorizeRead(ctx, r); err != nil {
			return nil, err
		}
		return s.node.Store().Range(r)
	}
	if r.Serializable {
		return read()
	}
	return Linearizable(s, ctx, read)
}

// Put writes one key.
func (s *Server) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := kv.CheckPut(r); err != nil {
		return nil, err
	}
	return Propose[pb.PutResponse](s, ctx, fsm.OpPut, r)
}

// DeleteRange deletes keys.
func (s *Server) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := kv.CheckDeleteRange(r); err != nil {
		return nil, err
	}
	return Propose[pb.DeleteRangeResponse](s, ctx, fsm.OpDeleteRange, r)
}

// Txn runs a transaction. One that writes nothing needs no log entry, only
// the same guarantee as a linearizable Range.
func (s *Server) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := kv.CheckTxn(r, s.limits.MaxTxnOps); err != nil {
		return nil, err
	}
	if !kv.IsReadOnlyTxn(r) {
		return Propose[pb.TxnResponse](s, ctx, fsm.OpTxn, r)
	}
	return Linearizable(s, ctx, func() (*pb.TxnResponse, error) {
		if err := s.AuthorizeRead(ctx, r); err != nil {
			return nil, err
		}
		return s.node.Store().Txn(r)
	})
}

// Compact compacts the history up to a revision.
func (s *Server) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return Propose[pb.CompactionResponse](s, ctx, fsm.OpCompact, r)
}

package transport

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
)

type kvService struct{ s *Server }

func (k *kvService) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := kv.CheckRange(r); err != nil {
		return nil, err
	}
	var resp *pb.RangeResponse
	var err error
	if r.Serializable {
		resp, err = k.s.node.Store().Range(r)
	} else {
		resp, err = linearizable(k.s, ctx, func() (*pb.RangeResponse, error) {
			return k.s.node.Store().Range(r)
		})
	}
	if err != nil {
		return nil, err
	}
	k.s.header(resp.Header)
	return resp, nil
}

func (k *kvService) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPut(r); err != nil {
		return nil, err
	}
	resp, err := propose(k.s, ctx, fsm.OpPut, r, func(ctx context.Context, c *grpc.ClientConn) (*pb.PutResponse, error) {
		return pb.NewKVClient(c).Put(ctx, r)
	})
	if err != nil {
		return nil, err
	}
	k.s.header(resp.Header)
	return resp, nil
}

func (k *kvService) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkDeleteRange(r); err != nil {
		return nil, err
	}
	resp, err := propose(k.s, ctx, fsm.OpDeleteRange, r, func(ctx context.Context, c *grpc.ClientConn) (*pb.DeleteRangeResponse, error) {
		return pb.NewKVClient(c).DeleteRange(ctx, r)
	})
	if err != nil {
		return nil, err
	}
	k.s.header(resp.Header)
	return resp, nil
}

func (k *kvService) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := checkTxn(r, k.s.limits.MaxTxnOps); err != nil {
		return nil, err
	}
	remote := func(ctx context.Context, c *grpc.ClientConn) (*pb.TxnResponse, error) {
		return pb.NewKVClient(c).Txn(ctx, r)
	}
	var resp *pb.TxnResponse
	var err error
	if isReadOnlyTxn(r) {
		// A txn that writes nothing needs no log entry, only the same
		// guarantee as a linearizable Range.
		resp, err = linearizable(k.s, ctx, func() (*pb.TxnResponse, error) {
			return k.s.node.Store().Txn(r)
		})
	} else {
		resp, err = propose(k.s, ctx, fsm.OpTxn, r, remote)
	}
	if err != nil {
		return nil, err
	}
	k.s.header(resp.Header)
	return resp, nil
}

func (k *kvService) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := propose(k.s, ctx, fsm.OpCompact, r, func(ctx context.Context, c *grpc.ClientConn) (*pb.CompactionResponse, error) {
		return pb.NewKVClient(c).Compact(ctx, r)
	})
	if err != nil {
		return nil, err
	}
	k.s.header(resp.Header)
	return resp, nil
}

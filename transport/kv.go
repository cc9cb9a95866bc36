package transport

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
)

type kvService struct{ s *Server }

func (k *kvService) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := kv.CheckRange(r); err != nil {
		return nil, err
	}
	if k.s.corrupt() {
		return nil, rpctypes.ErrGRPCCorrupt
	}
	read := func() (*pb.RangeResponse, error) {
		if err := k.s.authorizeRead(ctx, r); err != nil {
			return nil, err
		}
		return k.s.node.Store().Range(r)
	}
	var resp *pb.RangeResponse
	var err error
	if r.Serializable {
		resp, err = read()
	} else {
		resp, err = linearizable(k.s, ctx, read)
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
	resp, err := propose[*pb.PutResponse](k.s, ctx, fsm.OpPut, r)
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
	resp, err := propose[*pb.DeleteRangeResponse](k.s, ctx, fsm.OpDeleteRange, r)
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
	var resp *pb.TxnResponse
	var err error
	if isReadOnlyTxn(r) {
		// A txn that writes nothing needs no log entry, only the same
		// guarantee as a linearizable Range.
		resp, err = linearizable(k.s, ctx, func() (*pb.TxnResponse, error) {
			if err := k.s.authorizeRead(ctx, r); err != nil {
				return nil, err
			}
			return k.s.node.Store().Txn(r)
		})
	} else {
		resp, err = propose[*pb.TxnResponse](k.s, ctx, fsm.OpTxn, r)
	}
	if err != nil {
		return nil, err
	}
	k.s.header(resp.Header)
	return resp, nil
}

func (k *kvService) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := propose[*pb.CompactionResponse](k.s, ctx, fsm.OpCompact, r)
	if err != nil {
		return nil, err
	}
	k.s.header(resp.Header)
	return resp, nil
}

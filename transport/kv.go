package transport

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// kvService is the KV service's edge: each call runs in the request layer
// (server.KV), its error goes through the one table, and its header says
// this member's view.
type kvService struct{ s *Server }

func (k *kvService) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	resp, err := k.s.kv.Range(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	k.s.header(resp.Header)
	return resp, nil
}

func (k *kvService) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	resp, err := k.s.kv.Put(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	k.s.header(resp.Header)
	return resp, nil
}

func (k *kvService) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp, err := k.s.kv.DeleteRange(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	k.s.header(resp.Header)
	return resp, nil
}

func (k *kvService) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	resp, err := k.s.kv.Txn(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	k.s.header(resp.Header)
	return resp, nil
}

func (k *kvService) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := k.s.kv.Compact(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	k.s.header(resp.Header)
	return resp, nil
}

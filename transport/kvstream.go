package transport

import (
	"bytes"
	"context"
	"fmt"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/server"
)

// etcd 3.7 adds KV.RangeStream: a Range answered in chunks, so a large
// answer neither builds one huge message on the server nor needs a huge
// receive limit on the client (Kubernetes 1.37 lists through it and falls
// back to Range on Unimplemented). corenode's API types are etcd 3.6's,
// which lack the method, so the KV service is registered from kvServiceDesc:
// etcd 3.6's five methods plus RangeStream, whose answer,
// RangeStreamResponse, is one field around a RangeResponse.

// kvServiceDesc is the etcdserverpb.KV service as etcd 3.7 defines it.
var kvServiceDesc = grpc.ServiceDesc{
	ServiceName: "etcdserverpb.KV",
	HandlerType: (*pb.KVServer)(nil),
	Methods: []grpc.MethodDesc{
		kvMethod("Range", pb.KVServer.Range),
		kvMethod("Put", pb.KVServer.Put),
		kvMethod("DeleteRange", pb.KVServer.DeleteRange),
		kvMethod("Txn", pb.KVServer.Txn),
		kvMethod("Compact", pb.KVServer.Compact),
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "RangeStream",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			r := new(pb.RangeRequest)
			if err := stream.RecvMsg(r); err != nil {
				return err
			}
			return srv.(*kvService).RangeStream(r, stream)
		},
	}},
	Metadata: "rpc.proto",
}

// kvMethod describes one unary KV method as protoc-gen-go-grpc does: decode
// the request, run it through the server's interceptors, call the method.
func kvMethod[Req any, Resp any](name string, call func(pb.KVServer, context.Context, *Req) (Resp, error)) grpc.MethodDesc {
	full := "/etcdserverpb.KV/" + name
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			req := new(Req)
			if err := dec(req); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return call(srv.(pb.KVServer), ctx, req)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: full}
			return interceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
				return call(srv.(pb.KVServer), ctx, req.(*Req))
			})
		},
	}
}

// RangeStreamResponse is etcd 3.7's etcdserverpb.RangeStreamResponse:
// field 1, the chunk's RangeResponse. A Go client on etcd 3.6's API types
// receives it with grpc.ClientConn.NewStream on "/etcdserverpb.KV/RangeStream".
type RangeStreamResponse struct{ RangeResponse *pb.RangeResponse }

func (m *RangeStreamResponse) Reset() { *m = RangeStreamResponse{} }
func (m *RangeStreamResponse) String() string {
	return fmt.Sprintf("range_response:<%v>", m.RangeResponse)
}
func (*RangeStreamResponse) ProtoMessage() {}

// Marshal encodes the message as protoc would; gRPC's codec calls it.
func (m *RangeStreamResponse) Marshal() ([]byte, error) {
	if m.RangeResponse == nil {
		return nil, nil
	}
	inner, err := m.RangeResponse.Marshal()
	if err != nil {
		return nil, err
	}
	b := protowire.AppendTag(make([]byte, 0, len(inner)+8), 1, protowire.BytesType)
	return protowire.AppendBytes(b, inner), nil
}

// Unmarshal decodes what Marshal encoded, skipping unknown fields.
func (m *RangeStreamResponse) Unmarshal(b []byte) error {
	m.Reset()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			m.RangeResponse = new(pb.RangeResponse)
			if err := m.RangeResponse.Unmarshal(v); err != nil {
				return err
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

// rangeStreamFirstChunk is the first chunk's key count; later chunks grow
// or shrink toward rangeStreamChunkBytes (etcd starts at 10 too).
const rangeStreamFirstChunk = 10

// RangeStream answers r as Range would, in chunks: every chunk at the
// revision the stream started at (a linearizable stream waits once, before
// its first chunk), keys in order, and the last chunk alone carrying the
// header, More and Count, as etcd 3.7's. Sort orders and revision filters
// are Unimplemented, as in etcd, so a client falls back to Range.
func (k *kvService) RangeStream(r *pb.RangeRequest, stream grpc.ServerStream) error {
	ctx := stream.Context()
	if err := kv.CheckRange(r); err != nil {
		return err
	}
	// As etcd's: the orders a chunk of keys in key order can be given in
	// (an unspecified order sorts each chunk by its target, as Range does).
	if r.SortOrder != pb.RangeRequest_NONE && !(r.SortOrder == pb.RangeRequest_ASCEND && r.SortTarget == pb.RangeRequest_KEY) {
		return status.Error(codes.Unimplemented, "RangeStream does not support custom sort orders")
	}
	if r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0 {
		return status.Error(codes.Unimplemented, "RangeStream does not support revision filters")
	}
	if k.s.req.Corrupt() {
		return rpctypes.ErrGRPCCorrupt
	}
	store := k.s.node.Store()
	// The revision every chunk is read at: the current one once the read
	// is allowed and, unless serializable, once this member holds every
	// write acknowledged before the call.
	start := func() (int64, error) {
		if err := k.s.authorizeRead(ctx, r); err != nil {
			return 0, err
		}
		return store.Rev(), nil
	}
	var rev int64
	var err error
	if r.Serializable {
		rev, err = start()
	} else {
		rev, err = server.Linearizable(k.s.req, ctx, start)
	}
	if err != nil {
		return mapErr(ctx, err)
	}
	if r.Revision == 0 {
		r.Revision = rev
	}
	header := func() *pb.ResponseHeader { return k.s.header(&pb.ResponseHeader{Revision: rev}) }

	if r.CountOnly {
		resp, err := store.Range(r)
		if err != nil {
			return mapErr(ctx, err)
		}
		return stream.SendMsg(&RangeStreamResponse{&pb.RangeResponse{Header: header(), Count: resp.Count}})
	}
	total := r.Limit
	if total <= 0 {
		total = math.MaxInt64
	}
	target := k.s.req.Limits().MaxRequestBytes // NewServer set the default
	chunk := &pb.RangeRequest{Key: r.Key, RangeEnd: r.RangeEnd, Revision: r.Revision, KeysOnly: r.KeysOnly,
		SortOrder: r.SortOrder, SortTarget: r.SortTarget, Serializable: true, Limit: min(rangeStreamFirstChunk, total)}
	var sent int64
	for {
		resp, err := store.Range(chunk)
		if err != nil {
			return mapErr(ctx, err)
		}
		sent += int64(len(resp.Kvs))
		out := &pb.RangeResponse{Kvs: resp.Kvs}
		done := !resp.More || sent == total
		var next []byte
		if resp.More {
			// The chunk's keys are the next ones in key order, sorted by
			// the request's target: go on after the greatest.
			last := resp.Kvs[0].Key
			for _, kv := range resp.Kvs[1:] {
				if bytes.Compare(kv.Key, last) > 0 {
					last = kv.Key
				}
			}
			next = append(bytes.Clone(last), 0)
		}
		if done {
			out.Header, out.More, out.Count = header(), resp.More, sent
			if resp.More {
				rest, err := store.Range(&pb.RangeRequest{Key: next, RangeEnd: r.RangeEnd, Revision: r.Revision, CountOnly: true})
				if err != nil {
					return mapErr(ctx, err)
				}
				out.Count += rest.Count
			}
		}
		if err := stream.SendMsg(&RangeStreamResponse{out}); err != nil {
			return err
		}
		if done {
			return nil
		}
		chunk.Key = next
		chunk.Limit = min(nextChunkLimit(chunk.Limit, resp.Size(), target), total-sent)
	}
}

// nextChunkLimit doubles a chunk's key count while its chunks come out
// under half the target size and halves it while they come out over twice
// that, so chunks settle near the target without many round trips.
func nextChunkLimit(limit int64, size, target int) int64 {
	switch {
	case size < target/2 && limit < math.MaxInt64/2:
		return limit * 2
	case size > 2*target && limit > 1:
		return limit / 2
	}
	return limit
}

package transport

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
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

// RangeStream answers r as Range would, in chunks (server.RangeStream);
// the last chunk's header gets this member's view.
func (k *kvService) RangeStream(r *pb.RangeRequest, stream grpc.ServerStream) error {
	ctx := stream.Context()
	err := k.s.req.RangeStream(ctx, r, func(resp *pb.RangeResponse) error {
		if resp.Header != nil {
			k.s.header(resp.Header)
		}
		return stream.SendMsg(&RangeStreamResponse{resp})
	})
	return mapErr(ctx, err)
}

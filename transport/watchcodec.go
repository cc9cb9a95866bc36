package transport

import (
	"encoding/binary"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// A write to a key that many watchers watch is sent to each of them as its
// own WatchResponse: the same header and events, only the watch ID differs.
// Marshalling each copy was most of a member's CPU in the watch fan-out
// benchmark. A stream now encodes the shared part once (watchEncoder) and
// sends each watcher its ID field followed by those bytes; protobuf allows
// fields in any order, so the client decodes the very message it would
// have got.

// ServerOptions are the options the client port's gRPC server needs for the
// services Register adds.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(clientCodec{encoding.GetCodecV2(proto.Name)})}
}

// clientCodec is gRPC's protobuf codec, which also passes pre-encoded watch
// responses through. It keeps the name "proto", so clients see the content
// type they asked for.
type clientCodec struct{ proto encoding.CodecV2 }

func (c clientCodec) Marshal(v any) (mem.BufferSlice, error) {
	if o, ok := v.(*watchOut); ok {
		if o.shared == nil {
			return nil, fmt.Errorf("transport: watch response for watcher %d was not encoded", o.id)
		}
		if o.idLen == 0 {
			return mem.BufferSlice{mem.SliceBuffer(o.shared)}, nil
		}
		return mem.BufferSlice{mem.SliceBuffer(o.idField[:o.idLen]), mem.SliceBuffer(o.shared)}, nil
	}
	return c.proto.Marshal(v)
}

func (c clientCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c clientCodec) Name() string { return c.proto.Name() }

// watchOut is one response queued on a watch stream: either a ready
// message (resp: created, canceled and the like), or events for watcher id
// at revision rev, encoded by the stream's send loop.
type watchOut struct {
	resp *pb.WatchResponse

	id     int64
	rev    int64
	events []*mvccpb.Event

	// Filled in by watchEncoder: the watch_id field and the shared rest.
	idField [1 + binary.MaxVarintLen64]byte
	idLen   int
	shared  []byte
}

// watchEncoder keeps the last encoded header and events of one stream.
// Watchers of the same key get the same events slice from the store (see
// kv.Store.notify), so consecutive deliveries of one write reuse it.
//
// Concurrency: used by the stream's send loop alone.
type watchEncoder struct {
	hdr    header
	events []*mvccpb.Event
	shared []byte
}

// header is what a response header says (see Server.headerOf).
type header struct {
	cluster, member, term uint64
	rev                   int64
}

func (h header) proto() *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: h.cluster, MemberId: h.member, RaftTerm: h.term, Revision: h.rev}
}

// encode fills in o's wire form, with header h.
func (e *watchEncoder) encode(o *watchOut, h header) error {
	if e.shared == nil || h != e.hdr || !sameEvents(o.events, e.events) {
		resp := pb.WatchResponse{
			Header: h.proto(),
			Events: o.events,
		}
		b, err := resp.Marshal()
		if err != nil {
			return fmt.Errorf("transport: encode watch response: %w", err)
		}
		e.hdr, e.events, e.shared = h, o.events, b
	}
	o.shared = e.shared
	o.idLen = 0
	if o.id != 0 { // proto3 leaves a zero field out
		o.idField[0] = 2<<3 | 0 // field 2 (watch_id), varint
		o.idLen = 1 + binary.PutUvarint(o.idField[1:], uint64(o.id))
	}
	return nil
}

// sameEvents reports whether a and b are the same slice of the store's
// events (same elements in memory), so they hold the same events. The
// encoder holds on to the slice it compares with, so its memory is not
// reused for other events while cached.
func sameEvents(a, b []*mvccpb.Event) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}

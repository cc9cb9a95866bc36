package transport

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
)

// TestWatchEncoderMatchesProto: what a stream sends each watcher decodes
// to the WatchResponse it would have marshalled for that watcher, also when
// consecutive deliveries share the encoded part and when they must not.
func TestWatchEncoderMatchesProto(t *testing.T) {
	put := func(k, v string, rev int64) *mvccpb.Event {
		return &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(k), Value: []byte(v), ModRevision: rev, CreateRevision: rev, Version: 1}}
	}
	shared := []*mvccpb.Event{put("a", "1", 7), put("b", "2", 7)}
	other := []*mvccpb.Event{put("a", "1", 7), put("c", "3", 7)} // same length, other events
	h := header{cluster: 11, member: 22, term: 3, rev: 7}
	h8 := h
	h8.rev = 8
	h4 := h
	h4.term = 4
	codec := clientCodec{encoding.GetCodecV2(proto.Name)}

	var enc watchEncoder
	cases := []struct {
		name   string
		id     int64
		h      header
		events []*mvccpb.Event
	}{
		{"first watcher", 0, h, shared},
		{"second watcher, same events", 5, h, shared},
		{"large id", 1 << 40, h, shared},
		{"other events of the same length", 7, h, other},
		{"back to the first events", 6, h, shared},
		{"a sub-slice", 6, h, shared[1:]},
		{"a prefix", 6, h, shared[:1]},
		{"progress notification", 8, h8, nil},
		{"new term", 8, h4, shared},
	}
	for _, c := range cases {
		o := &watchOut{id: c.id, rev: c.h.rev, events: c.events}
		if err := enc.encode(o, c.h); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		bs, err := codec.Marshal(o)
		if err != nil {
			t.Fatalf("%s: marshal: %v", c.name, err)
		}
		var got pb.WatchResponse
		if err := got.Unmarshal(bs.Materialize()); err != nil {
			t.Fatalf("%s: unmarshal: %v", c.name, err)
		}
		want := pb.WatchResponse{
			Header:  &pb.ResponseHeader{ClusterId: c.h.cluster, MemberId: c.h.member, RaftTerm: c.h.term, Revision: c.h.rev},
			WatchId: c.id, Events: c.events,
		}
		gb, _ := got.Marshal()
		wb, _ := want.Marshal()
		if !bytes.Equal(gb, wb) {
			t.Fatalf("%s: decoded %v, want %v", c.name, &got, &want)
		}
	}

	// Everything else still goes through protobuf.
	bs, err := codec.Marshal(&pb.RangeResponse{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	var rr pb.RangeResponse
	if err := codec.Unmarshal(bs, &rr); err != nil || rr.Count != 3 {
		t.Fatalf("range response through the codec: %v, count %d", err, rr.Count)
	}
	if _, err := codec.Marshal(&watchOut{id: 1}); err == nil {
		t.Fatal("an unencoded watch response was marshalled")
	}
}

// BenchmarkWatchFanOutEncode: the encoding work a stream does to send one
// write to 100 watchers of its key, marshalling each response (what gRPC's
// codec did before) against encoding the shared part once.
func BenchmarkWatchFanOutEncode(b *testing.B) {
	const watchers = 100
	events := []*mvccpb.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/corebench/watch"), Value: []byte("12345678"),
		CreateRevision: 2, ModRevision: 1000, Version: 999}}}
	h := header{cluster: 0x1234567890, member: 0xabcdef123456, term: 7, rev: 1000}
	codec := clientCodec{encoding.GetCodecV2(proto.Name)}
	b.Run("per-watcher", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for id := range int64(watchers) {
				resp := &pb.WatchResponse{Header: &pb.ResponseHeader{ClusterId: h.cluster, MemberId: h.member, RaftTerm: h.term, Revision: h.rev},
					WatchId: id, Events: events}
				bs, err := codec.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				bs.Free()
			}
		}
	})
	b.Run("shared", func(b *testing.B) {
		b.ReportAllocs()
		var enc watchEncoder
		for b.Loop() {
			write := []*mvccpb.Event{events[0]} // each write's events are new to the encoder
			for id := range int64(watchers) {
				o := &watchOut{id: id, rev: h.rev, events: write}
				if err := enc.encode(o, h); err != nil {
					b.Fatal(err)
				}
				if _, err := codec.Marshal(o); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

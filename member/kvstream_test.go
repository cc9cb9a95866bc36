package member_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
	"github.com/corenode/corenode/transport"
)

// rangeStream calls KV.RangeStream on cli's connection and returns the
// chunks it answered.
func rangeStream(ctx context.Context, cli *clientv3.Client, r *pb.RangeRequest) ([]*pb.RangeResponse, error) {
	s, err := cli.ActiveConnection().NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/etcdserverpb.KV/RangeStream")
	if err != nil {
		return nil, err
	}
	if err := s.SendMsg(r); err != nil {
		return nil, err
	}
	if err := s.CloseSend(); err != nil {
		return nil, err
	}
	var out []*pb.RangeResponse
	for {
		var m transport.RangeStreamResponse
		if err := s.RecvMsg(&m); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, err
		}
		out = append(out, m.RangeResponse)
	}
}

// TestRangeStream: etcd 3.7's KV.RangeStream answers what Range answers,
// in chunks of about --max-request-bytes, each at the revision the stream
// started at, the last alone with the header, More and Count; it is
// served by a follower after a read index like Range; sort orders are
// Unimplemented, so a client falls back to Range.
func TestRangeStream(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(i int, cfg *member.Config) { cfg.MaxRequestBytes = 4096 }))
	ctx := ctxT(t)
	leader := c.WaitLeader()
	cli := c.Client(leader)
	value := strings.Repeat("v", 100)
	for i := range 300 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/s/%03d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	follower := c.Client((leader + 1) % 3)
	for _, tc := range []struct {
		name  string
		req   *pb.RangeRequest
		count int64
		keys  int
		more  bool
	}{
		{"all", &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0")}, 300, 300, false},
		{"limit", &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0"), Limit: 150}, 300, 150, true},
		{"keys only", &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0"), KeysOnly: true}, 300, 300, false},
		{"serializable", &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0"), Serializable: true}, 300, 300, false},
		{"count only", &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0"), CountOnly: true}, 300, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := follower.Do(ctx, clientv3.OpGet("/s/", clientv3.WithRange("/s0"), clientv3.WithLimit(tc.req.Limit), clientv3.WithKeysOnly()))
			if err != nil {
				t.Fatal(err)
			}
			chunks, err := rangeStream(ctx, follower, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for i, ch := range chunks {
				last := i == len(chunks)-1
				if (ch.Header != nil) != last || (!last && (ch.More || ch.Count != 0)) {
					t.Fatalf("chunk %d of %d: header %v more %v count %d", i, len(chunks), ch.Header, ch.More, ch.Count)
				}
				for _, kv := range ch.Kvs {
					keys = append(keys, string(kv.Key))
					if tc.req.KeysOnly != (len(kv.Value) == 0) {
						t.Fatalf("keys only %v, value %q", tc.req.KeysOnly, kv.Value)
					}
				}
			}
			last := chunks[len(chunks)-1]
			if last.Count != tc.count || last.More != tc.more || len(keys) != tc.keys || last.Header.Revision != want.Get().Header.Revision {
				t.Fatalf("%d chunks: count %d more %v keys %d revision %d, want %d %v %d %d",
					len(chunks), last.Count, last.More, len(keys), last.Header.Revision, tc.count, tc.more, tc.keys, want.Get().Header.Revision)
			}
			for i, k := range keys {
				if w := string(want.Get().Kvs[i].Key); k != w {
					t.Fatalf("key %d: %s, want %s", i, k, w)
				}
			}
			if tc.keys > 100 && !tc.req.KeysOnly && len(chunks) < 5 {
				t.Fatalf("%d keys of 100 bytes in %d chunks under a 4 KiB limit", tc.keys, len(chunks))
			}
		})
	}
	_, err := rangeStream(ctx, follower, &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0"), SortOrder: pb.RangeRequest_DESCEND})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("a sorted stream: %v, want Unimplemented", err)
	}
	// An unspecified order with another target sorts each chunk by it, as
	// etcd's: all 300 keys still come, each once.
	chunks, err := rangeStream(ctx, follower, &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0"), SortTarget: pb.RangeRequest_CREATE})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ch := range chunks {
		for i, kv := range ch.Kvs {
			if seen[string(kv.Key)] || (i > 0 && kv.CreateRevision < ch.Kvs[i-1].CreateRevision) {
				t.Fatalf("key %s twice or out of create order in its chunk", kv.Key)
			}
			seen[string(kv.Key)] = true
		}
	}
	if len(seen) != 300 {
		t.Fatalf("%d keys by create revision, want 300", len(seen))
	}
	if _, err := rangeStream(ctx, follower, &pb.RangeRequest{}); err == nil || !strings.Contains(err.Error(), "key is not provided") {
		t.Fatalf("an empty key: %v", err)
	}
}

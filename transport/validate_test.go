package transport

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func put(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
}

func del(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
}

func nested(success, failure []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: success, Failure: failure}}}
}

func TestCheckTxn(t *testing.T) {
	cases := []struct {
		name string
		ops  []*pb.RequestOp
		want error
	}{
		{"distinct puts", []*pb.RequestOp{put("a"), put("b")}, nil},
		{"two puts of one key", []*pb.RequestOp{put("a"), put("a")}, rpctypes.ErrGRPCDuplicateKey},
		{"put inside a deleted range", []*pb.RequestOp{del("a", "c"), put("b")}, rpctypes.ErrGRPCDuplicateKey},
		{"put outside a deleted range", []*pb.RequestOp{del("a", "c"), put("c")}, nil},
		{"same key in the two branches of a nested txn", []*pb.RequestOp{nested([]*pb.RequestOp{put("a")}, []*pb.RequestOp{put("a")})}, nil},
		{"nested put repeats an outer put", []*pb.RequestOp{put("a"), nested([]*pb.RequestOp{put("a")}, nil)}, rpctypes.ErrGRPCDuplicateKey},
		{"empty key", []*pb.RequestOp{put("")}, rpctypes.ErrGRPCEmptyKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkTxn(&pb.TxnRequest{Success: tc.ops}, 128); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if isReadOnlyTxn(&pb.TxnRequest{Failure: []*pb.RequestOp{nested(nil, []*pb.RequestOp{put("x")})}}) {
		t.Fatal("a txn with a nested put is not read-only")
	}
}

// FuzzCheckTxn feeds arbitrary wire bytes through the validation a Txn
// request meets before it is proposed: it must never panic, and a request
// it accepts must encode within the size it reports.
func FuzzCheckTxn(f *testing.F) {
	seed, _ := (&pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("k")}},
		Success: []*pb.RequestOp{put("a"), del("b", "c"), nested([]*pb.RequestOp{put("d")}, nil)}}).Marshal()
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var r pb.TxnRequest
		if err := r.Unmarshal(data); err != nil {
			return
		}
		if err := checkTxn(&r, 128); err != nil {
			return
		}
		isReadOnlyTxn(&r)
		if b, err := r.Marshal(); err != nil || len(b) != r.Size() {
			t.Fatalf("accepted request does not re-encode: %v", err)
		}
	})
}

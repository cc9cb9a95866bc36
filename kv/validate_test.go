package kv

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func reqPut(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
}

func reqDel(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
}

func reqTxn(success, failure []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: success, Failure: failure}}}
}

func TestCheckTxn(t *testing.T) {
	cases := []struct {
		name string
		ops  []*pb.RequestOp
		want error
	}{
		{"distinct puts", []*pb.RequestOp{reqPut("a"), reqPut("b")}, nil},
		{"two puts of one key", []*pb.RequestOp{reqPut("a"), reqPut("a")}, ErrDuplicateKey},
		{"put inside a deleted range", []*pb.RequestOp{reqDel("a", "c"), reqPut("b")}, ErrDuplicateKey},
		{"put outside a deleted range", []*pb.RequestOp{reqDel("a", "c"), reqPut("c")}, nil},
		{"same key in the two branches of a nested txn", []*pb.RequestOp{reqTxn([]*pb.RequestOp{reqPut("a")}, []*pb.RequestOp{reqPut("a")})}, nil},
		{"nested put repeats an outer put", []*pb.RequestOp{reqPut("a"), reqTxn([]*pb.RequestOp{reqPut("a")}, nil)}, ErrDuplicateKey},
		{"empty key", []*pb.RequestOp{reqPut("")}, ErrEmptyKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckTxn(&pb.TxnRequest{Success: tc.ops}, 128); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if IsReadOnlyTxn(&pb.TxnRequest{Failure: []*pb.RequestOp{reqTxn(nil, []*pb.RequestOp{reqPut("x")})}}) {
		t.Fatal("a txn with a nested put is not read-only")
	}
}

// FuzzCheckTxn feeds arbitrary wire bytes through the validation a Txn
// request meets before it is proposed: it must never panic, and a request
// it accepts must encode within the size it reports.
func FuzzCheckTxn(f *testing.F) {
	seed, _ := (&pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("k")}},
		Success: []*pb.RequestOp{reqPut("a"), reqDel("b", "c"), reqTxn([]*pb.RequestOp{reqPut("d")}, nil)}}).Marshal()
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var r pb.TxnRequest
		if err := r.Unmarshal(data); err != nil {
			return
		}
		if err := CheckTxn(&r, 128); err != nil {
			return
		}
		IsReadOnlyTxn(&r)
		if b, err := r.Marshal(); err != nil || len(b) != r.Size() {
			t.Fatalf("accepted request does not re-encode: %v", err)
		}
	})
}

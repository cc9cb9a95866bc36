package kv

import (
	"errors"
	"fmt"
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
		{"an op naming no request", []*pb.RequestOp{reqPut("a"), {}}, ErrKeyNotFound},
		{"too many ops in a nested branch", []*pb.RequestOp{reqTxn(nil, []*pb.RequestOp{reqPut("a"), reqPut("b"), reqPut("c"), reqPut("d")})}, ErrTooManyOps},
		{"a repeat two nested branches down", []*pb.RequestOp{reqPut("a"), reqTxn(nil, []*pb.RequestOp{reqTxn([]*pb.RequestOp{reqPut("a")}, nil)})}, ErrDuplicateKey},
		{"a put inside a range deleted in its own nested branch", []*pb.RequestOp{reqTxn([]*pb.RequestOp{reqPut("b"), reqDel("a", "\x00")}, nil)}, ErrDuplicateKey},
		// etcd's rule before proposing is narrower than "touches the same
		// key": an outer put after a nested one, or a nested put inside an
		// outer deleted range, pass here and are refused at apply.
		{"an outer put repeats a nested put", []*pb.RequestOp{reqTxn([]*pb.RequestOp{reqPut("a")}, nil), reqPut("a")}, nil},
		{"a nested put inside an outer deleted range", []*pb.RequestOp{reqDel("a", "z"), reqTxn([]*pb.RequestOp{reqPut("b")}, nil)}, nil},
		// Of several faults, a txn's own ops are checked before its
		// duplicates, a nested txn's duplicates in its place.
		{"a nested duplicate before a later empty key", []*pb.RequestOp{reqTxn([]*pb.RequestOp{reqPut("a"), reqPut("a")}, nil), reqPut("")}, ErrDuplicateKey},
		{"an empty key before the txn's own duplicate", []*pb.RequestOp{reqPut("a"), reqPut("a"), reqPut("")}, ErrEmptyKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, txn := range []*pb.TxnRequest{{Success: tc.ops}, {Failure: tc.ops}} {
				if err := CheckTxn(txn, 3); !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
			}
		})
	}
}

// TestCheckTxnManyPuts: past indexFrom puts, keys are looked up in a map
// that follows the branches as they open and end, as the search does.
func TestCheckTxnManyPuts(t *testing.T) {
	many := func(extra ...*pb.RequestOp) []*pb.RequestOp {
		var ops []*pb.RequestOp
		for i := range indexFrom + 8 {
			ops = append(ops, reqPut(fmt.Sprintf("k%02d", i)))
		}
		return append(ops, extra...)
	}
	cases := []struct {
		name string
		ops  []*pb.RequestOp
		want error
	}{
		{"distinct", many(), nil},
		{"a repeat", many(reqPut("k03")), ErrDuplicateKey},
		{"a nested repeat", many(reqTxn(nil, []*pb.RequestOp{reqPut("k39")})), ErrDuplicateKey},
		{"a key put again after the nested branch that put it ended", many(reqTxn([]*pb.RequestOp{reqPut("n")}, nil), reqPut("n")), nil},
		{"a nested branch's many puts, then its sibling's", []*pb.RequestOp{reqTxn(many(), many())}, nil},
	}
	for _, tc := range cases {
		if err := CheckTxn(&pb.TxnRequest{Success: tc.ops}, 128); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
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

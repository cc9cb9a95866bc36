package kv

import (
	"fmt"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// touched renders what Touches lists: access, key, end and the kind of
// message, in order.
func touched(req any) []string {
	var out []string
	for t := range Touches(req) {
		a := map[Access]string{Read: "R", Write: "W"}[t.Access]
		out = append(out, fmt.Sprintf("%s %q %q %T", a, t.Key, t.End, t.Req))
	}
	return out
}

func reqRange(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
}

func TestTouches(t *testing.T) {
	// "b0" is the prefix end of "b/": etcd's WithPrefix("b/").
	nested := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("n"), RangeEnd: []byte("o")}},
		Success: []*pb.RequestOp{reqPut("ns")},
		Failure: []*pb.RequestOp{reqDel("nf", "\x00"), reqTxn([]*pb.RequestOp{reqPut("deep")}, nil)},
	}
	cases := []struct {
		name string
		req  any
		want []string
	}{
		{"range of one key", &pb.RangeRequest{Key: []byte("k")}, []string{
			`R "k" "" *etcdserverpb.RangeRequest`}},
		{"range of a prefix", &pb.RangeRequest{Key: []byte("b/"), RangeEnd: []byte("b0")}, []string{
			`R "b/" "b0" *etcdserverpb.RangeRequest`}},
		{"put", &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}, []string{
			`W "k" "" *etcdserverpb.PutRequest`}},
		{"delete of one key", &pb.DeleteRangeRequest{Key: []byte("k")}, []string{
			`W "k" "" *etcdserverpb.DeleteRangeRequest`}},
		{"delete from a key on", &pb.DeleteRangeRequest{Key: []byte("k"), RangeEnd: []byte{0}}, []string{
			`W "k" "\x00" *etcdserverpb.DeleteRangeRequest`}},
		{"delete of everything", &pb.DeleteRangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}, []string{
			`W "\x00" "\x00" *etcdserverpb.DeleteRangeRequest`}},
		{"delete of a prefix", &pb.DeleteRangeRequest{Key: []byte("b/"), RangeEnd: []byte("b0")}, []string{
			`W "b/" "b0" *etcdserverpb.DeleteRangeRequest`}},
		{"txn: compares, success, failure, nested in place", &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("c")}, {Key: []byte("p/"), RangeEnd: []byte("p0")}},
			Success: []*pb.RequestOp{reqPut("s"), reqRange("r", "\x00"), {Request: &pb.RequestOp_RequestTxn{RequestTxn: nested}}, reqDel("b/", "b0")},
			Failure: []*pb.RequestOp{reqDel("f", ""), reqRange("g", "")},
		}, []string{
			`R "c" "" *etcdserverpb.Compare`,
			`R "p/" "p0" *etcdserverpb.Compare`,
			`W "s" "" *etcdserverpb.PutRequest`,
			`R "r" "\x00" *etcdserverpb.RangeRequest`,
			`R "n" "o" *etcdserverpb.Compare`,
			`W "ns" "" *etcdserverpb.PutRequest`,
			`W "nf" "\x00" *etcdserverpb.DeleteRangeRequest`,
			`W "deep" "" *etcdserverpb.PutRequest`,
			`W "b/" "b0" *etcdserverpb.DeleteRangeRequest`,
			`W "f" "" *etcdserverpb.DeleteRangeRequest`,
			`R "g" "" *etcdserverpb.RangeRequest`,
		}},
		{"empty txn", &pb.TxnRequest{}, nil},
		{"ops naming no request, and nil messages, touch empty keys", &pb.TxnRequest{
			Compare: []*pb.Compare{nil},
			Success: []*pb.RequestOp{{}, nil, {Request: &pb.RequestOp_RequestPut{}}, {Request: &pb.RequestOp_RequestTxn{}}},
		}, []string{
			`R "" "" *etcdserverpb.Compare`,
			`W "" "" *etcdserverpb.PutRequest`,
		}},
		{"not a key-value request", &pb.CompactionRequest{Revision: 3}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := touched(tc.req); !slices.Equal(got, tc.want) {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestTouchesStopsWhenAsked(t *testing.T) {
	txn := &pb.TxnRequest{Success: []*pb.RequestOp{reqPut("a"), reqTxn([]*pb.RequestOp{reqPut("b"), reqPut("c")}, nil), reqPut("d")}}
	var seen []string
	for tc := range Touches(txn) {
		seen = append(seen, string(tc.Key))
		if string(tc.Key) == "b" {
			break
		}
	}
	if !slices.Equal(seen, []string{"a", "b"}) {
		t.Fatalf("saw %q after breaking at b", seen)
	}
}

func TestIsReadOnlyTxn(t *testing.T) {
	cases := []struct {
		name string
		txn  *pb.TxnRequest
		want bool
	}{
		{"empty", &pb.TxnRequest{}, true},
		{"compares and ranges", &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("c")}}, Success: []*pb.RequestOp{reqRange("a", "\x00")}}, true},
		{"a put in the failure branch", &pb.TxnRequest{Failure: []*pb.RequestOp{reqPut("x")}}, false},
		{"a delete nested in a failure branch", &pb.TxnRequest{Failure: []*pb.RequestOp{reqTxn(nil, []*pb.RequestOp{reqDel("x", "")})}}, false},
		{"nested reads only", &pb.TxnRequest{Success: []*pb.RequestOp{reqTxn([]*pb.RequestOp{reqRange("a", "")}, nil)}}, true},
	}
	for _, tc := range cases {
		if got := IsReadOnlyTxn(tc.txn); got != tc.want {
			t.Errorf("%s: read-only %v, want %v", tc.name, got, tc.want)
		}
	}
}

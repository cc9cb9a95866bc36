package fsm

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/lease"
)

func mustEncode(tb testing.TB, op Op, msg Message) []byte {
	b, err := Encode(op, msg)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkIdleLeaseMemory measures the heap a leader holds per idle lease
// with one attached key (lease table + tracker + key), at 1,000,000 leases:
//
//	go test -run '^$' -bench IdleLeaseMemory -benchtime 1x ./fsm/
func BenchmarkIdleLeaseMemory(b *testing.B) {
	const n = 1_000_000
	tr := lease.NewTracker(lease.SystemClock{}, lease.TrackerConfig{CheckpointAfter: time.Hour})
	tr.Promote(0, nil)
	f := New(nil, tr, nil)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	const batch = 512
	logs := make([]*raft.Log, 0, batch)
	index := uint64(1)
	flush := func() {
		f.ApplyBatch(logs)
		logs = logs[:0]
	}
	for i := int64(1); i <= n; i++ {
		logs = append(logs,
			&raft.Log{Index: index, Type: raft.LogCommand, Data: mustEncode(b, OpLeaseGrant, &pb.LeaseGrantRequest{ID: i, TTL: 60})},
			&raft.Log{Index: index + 1, Type: raft.LogCommand, Data: mustEncode(b, OpPut, &pb.PutRequest{
				Key: fmt.Appendf(nil, "/services/instance-%07d", i), Value: []byte("10.0.0.1:8080"), Lease: i})})
		index += 2
		if len(logs) >= batch {
			flush()
		}
	}
	flush()
	b.StopTimer()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if f.LeaseCount() != n || tr.Len() != n {
		b.Fatalf("%d leases in the table, %d tracked", f.LeaseCount(), tr.Len())
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/lease")
	runtime.KeepAlive(f)
	runtime.KeepAlive(tr)
}

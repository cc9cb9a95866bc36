//go:build linux

package logstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/verifier"
)

// TestLogVerifierFindsInFlightChange runs raft-wal's verifier over the
// member's own log store, as Verifier stacks them: the leader stamps a
// barrier with the sum of what it wrote, a follower that stored the same
// entries verifies the range (the sum survives checkedStore's trailer),
// and one that stored an entry changed on its way is told of a mismatch.
// It also pins what the verifier relies on in raft: the stamp is written
// into the very entry raft then replicates.
func TestLogVerifierFindsInFlightChange(t *testing.T) {
	for _, kind := range []string{WAL, BoltDB} {
		t.Run(kind, func(t *testing.T) {
			open := func() (*verifier.LogStore, <-chan verifier.VerificationReport) {
				s, err := Open(Config{DataDir: t.TempDir(), Kind: kind, Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				reports := make(chan verifier.VerificationReport, 4)
				v := verifier.NewLogStore(struct{ raft.LogStore }{s}, isCheckpoint,
					func(r verifier.VerificationReport) { reports <- r }, noWALMetrics{})
				t.Cleanup(func() { v.Close(); s.Close() })
				return v, reports
			}
			entries := func() []*raft.Log {
				var logs []*raft.Log
				for i := uint64(1); i <= 10; i++ {
					logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "put-%d", i)})
				}
				// The leader's barrier opens the range; the next one closes it.
				logs[0] = &raft.Log{Index: 1, Term: 1, Type: raft.LogBarrier}
				return append(logs, &raft.Log{Index: 11, Term: 1, Type: raft.LogBarrier})
			}
			leader, leaderReports := open()
			sent := entries()
			// The barrier at 1 reports the empty range before it, the one at
			// 11 the range [1, 11). The verifier drops a report while one
			// waits, so the entries go in two appends, each waited for.
			report := func(ch <-chan verifier.VerificationReport, end uint64) verifier.VerificationReport {
				for {
					select {
					case r := <-ch:
						if r.Range.End == end {
							return r
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("no verification report of the range ending at %d", end)
					}
				}
			}
			store := func(v *verifier.LogStore, ch <-chan verifier.VerificationReport, logs []*raft.Log) verifier.VerificationReport {
				if err := v.StoreLogs(logs[:1]); err != nil {
					t.Fatal(err)
				}
				report(ch, 1)
				if err := v.StoreLogs(logs[1:]); err != nil {
					t.Fatal(err)
				}
				return report(ch, 11)
			}
			if r := store(leader, leaderReports, sent); r.Err != nil || r.Range != (verifier.LogRange{Start: 1, End: 11}) {
				t.Fatalf("leader's own range: %+v", r)
			}
			if len(sent[10].Extensions) == 0 {
				t.Fatal("the leader's barrier carries no sum: raft would replicate it unstamped")
			}
			// What a follower receives: copies of the leader's entries, the
			// stamps included.
			received := func(change bool) []*raft.Log {
				var out []*raft.Log
				for _, l := range sent {
					c := *l
					c.Data = append([]byte(nil), l.Data...)
					c.Extensions = append([]byte(nil), l.Extensions...)
					out = append(out, &c)
				}
				if change {
					out[4].Data[0] ^= 0x01
				}
				return out
			}
			good, goodReports := open()
			if r := store(good, goodReports, received(false)); r.Err != nil || r.WrittenSum != r.ExpectedSum || r.ReadSum != r.ExpectedSum {
				t.Fatalf("a follower with the leader's entries: %+v", r)
			}
			bad, badReports := open()
			var mismatch verifier.ErrChecksumMismatch
			if r := store(bad, badReports, received(true)); !errors.As(r.Err, &mismatch) {
				t.Fatalf("a follower that stored a changed entry: %+v, want a checksum mismatch", r)
			}
		})
	}
}

// TestLogVerifierAfterTailRemoval: entries stored and then removed by raft
// (a follower's tail that a new leader replaced) count in no sum: a leader
// that replaced its own tail, and a follower that did, both verify the next
// range without a mismatch.
func TestLogVerifierAfterTailRemoval(t *testing.T) {
	reports := make(chan verifier.VerificationReport, 16)
	s, err := Open(Config{DataDir: t.TempDir(), Kind: WAL, ID: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := s.Verifier(1)
	defer v.Close()
	// The same verifier, reporting to the test.
	v.fresh = func() *verifier.LogStore {
		return verifier.NewLogStore(struct{ raft.LogStore }{s}, isCheckpoint, func(r verifier.VerificationReport) { reports <- r }, noWALMetrics{})
	}
	v.cur.Swap(v.fresh()).Close()
	put := func(i, term uint64, typ raft.LogType, data string) *raft.Log {
		l := &raft.Log{Index: i, Term: term, Type: typ, Data: []byte(data)}
		if err := v.StoreLogs([]*raft.Log{l}); err != nil {
			t.Fatal(err)
		}
		return l
	}
	put(1, 1, raft.LogBarrier, "")
	// The verifier drops a report while another waits: take this one first.
	select {
	case <-reports:
	case <-time.After(10 * time.Second):
		t.Fatal("no report of the first barrier")
	}
	put(2, 1, raft.LogCommand, "a")
	put(3, 1, raft.LogCommand, "stale") // replaced below
	if err := v.DeleteRange(3, 3); err != nil {
		t.Fatal(err)
	}
	put(3, 2, raft.LogCommand, "b")
	put(4, 2, raft.LogBarrier, "")
	for {
		select {
		case r := <-reports:
			if r.Range.End != 4 {
				continue
			}
			if r.Err != nil {
				t.Fatalf("range after the tail was replaced: %+v", r)
			}
			if r.Range.Start != 3 {
				t.Fatalf("range %s, want it to start at the first entry after the removal", r.Range)
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("no report of the range ending at the barrier")
		}
	}
}

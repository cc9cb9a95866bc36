// Log verification: every member checks that the entries it stored are
// the ones the leader wrote, and that what it reads back from its disk is
// what it stored (hashicorp/raft-wal's verifier, as Consul runs it).
//
// The entry checksums of checkedStore catch a byte that changes on disk
// after the write, but not an entry that was already wrong when it was
// written: changed in flight, or by a bug between the transport and the
// store. So the leader appends a checkpoint on a timer (package node does:
// a raft barrier, an entry every member already understands and the FSM
// never sees) and its log store records in it a running checksum of the
// entries since the last one, before raft replicates it. A follower's log
// store keeps the same sum over what it stored, and when the checkpoint
// arrives compares the two, then reads the range back from its disk and
// compares again, on a goroutine of its own. Every member also reads back its own range, the
// leader included.
//
// A mismatch means this member's log, and so possibly its state, is not
// the cluster's: the member says so in one line with the steps to replace
// it and counts it in corenode_log_verifications_total{result="mismatch"}.
// It raises no alarm itself: an entry that differs changes the state it
// applies to, and the corruption check (package integrity), which compares
// the members' state, raises CORRUPT against the member that differs.
//
// The verifier keeps running sums of what was stored since the last
// checkpoint, and raft-wal's verifier does not undo them when raft removes
// the log's tail (a follower's entries that a new leader replaced, the
// whole log after a snapshot is installed): the sums would then count
// entries the log no longer holds, and a healthy member, or every follower
// of a leader that once replaced its own tail, would report a mismatch.
// Verifier therefore starts a fresh verifier at every tail removal: its
// next range starts after it, and a follower whose range differs from the
// leader's checks what it reads back only.

package logstore

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/verifier"
)

// isCheckpoint says which entries carry the verifier's sums: raft's
// barriers, which the leader appends at the start of every term and on
// the verify timer.
func isCheckpoint(l *raft.Log) (bool, error) { return StampedOnStore(l), nil }

// StampedOnStore reports whether the leader's log store writes into l as
// it stores it: a verification checkpoint gets the sum of the entries
// before it in its Extensions. Whoever sends entries before they are
// stored (node's early replication) must leave such an entry to raft, which
// sends it after, stamped.
func StampedOnStore(l *raft.Log) bool { return l.Type == raft.LogBarrier }

// noWALMetrics drops raft-wal's own counters; the report is counted in
// corenode_log_verifications_total.
type noWALMetrics struct{}

func (noWALMetrics) IncrementCounter(string, uint64) {}
func (noWALMetrics) SetGauge(string, uint64)         {}

// Verifier is raft's log store below the log cache (which keeps the very
// entries the verifier stamps, so the leader replicates the stamp): the
// store, with raft-wal's verifier stamping and checking the checkpoints,
// replaced by a fresh one whenever raft removes the log's tail (see the
// comment above).
//
// Concurrency: raft appends and removes the tail from its main goroutine
// only (a follower's appendEntries and installSnapshot, the leader's
// loop), so a swap never races an append; head compaction (the snapshot
// goroutine) leaves the sums alone. Reads go to whichever verifier is
// current, all of which read the same store.
type Verifier struct {
	cur   atomic.Pointer[verifier.LogStore]
	inner raft.LogStore
	fresh func() *verifier.LogStore
}

// Verifier returns s verified as raft's log store; id is the member's ID,
// which a mismatch's advice names. Close it before s.
func (s *Store) Verifier(id uint64) *Verifier {
	report := func(r verifier.VerificationReport) { s.verified(id, r) }
	v := &Verifier{inner: s, fresh: func() *verifier.LogStore {
		// The verifier closes a store that is an io.Closer when it is
		// closed; the swap must not close the member's store.
		return verifier.NewLogStore(struct{ raft.LogStore }{s}, isCheckpoint, report, noWALMetrics{})
	}}
	v.cur.Store(v.fresh())
	return v
}

func (v *Verifier) FirstIndex() (uint64, error)            { return v.inner.FirstIndex() }
func (v *Verifier) LastIndex() (uint64, error)             { return v.inner.LastIndex() }
func (v *Verifier) GetLog(index uint64, l *raft.Log) error { return v.inner.GetLog(index, l) }
func (v *Verifier) StoreLog(l *raft.Log) error             { return v.cur.Load().StoreLogs([]*raft.Log{l}) }
func (v *Verifier) StoreLogs(logs []*raft.Log) error       { return v.cur.Load().StoreLogs(logs) }

// IsMonotonic passes the store's answer through (see isMonotonic).
func (v *Verifier) IsMonotonic() bool { return isMonotonic(v.inner) }

func (v *Verifier) DeleteRange(min, max uint64) error {
	last, err := v.inner.LastIndex()
	if err != nil {
		return err
	}
	if err := v.inner.DeleteRange(min, max); err != nil {
		return err
	}
	if max >= last {
		v.cur.Swap(v.fresh()).Close()
	}
	return nil
}

// Close stops the current verifier's goroutine; the store stays open.
func (v *Verifier) Close() { v.cur.Load().Close() }

// verified receives the verifier's report of each checkpoint's range, on
// the verifier's goroutine, one at a time; id is the member's.
func (s *Store) verified(id uint64, r verifier.VerificationReport) {
	var mismatch verifier.ErrChecksumMismatch
	switch {
	case r.Err == nil:
		s.metrics.verifications.WithLabelValues("ok").Inc()
		s.log.Debug("raft log verified", "range", r.Range.String(), "took", r.Elapsed)
	case errors.Is(r.Err, verifier.ErrRangeMismatch):
		// The range was compacted away before it could be read back:
		// nothing is known either way.
		s.metrics.verifications.WithLabelValues("incomplete").Inc()
	case errors.As(r.Err, &mismatch):
		s.metrics.verifications.WithLabelValues("mismatch").Inc()
		s.log.Error(fmt.Sprintf("this member's raft log does not match the leader's, so its state must not be trusted: "+
			"remove it from the cluster (etcdctl member remove %x), delete %s, then add it again "+
			"(etcdctl member add) and start it with --initial-cluster-state existing", id, WhatToDelete(s.dataDir, s.logDir)),
			"range", r.Range.String(), "err", r.Err)
	default:
		s.metrics.verifications.WithLabelValues("error").Inc()
		s.log.Warn("raft log verification could not read the range back", "range", r.Range.String(), "err", r.Err)
	}
}

// Log verification: every member checks that the entries it stored are
// the ones the leader wrote, and that what it reads back from its disk is
// what it stored (hashicorp/raft-wal's verifier, as Consul runs it).
//
// The entry checksums of checkedStore catch a byte that changes on disk
// after the write, but not an entry that was already wrong when it was
// written: changed in flight, or by a bug between the transport and the
// store. So the leader appends a checkpoint on a timer (a raft barrier, an
// entry every member already understands and the FSM never sees) and its
// log store records in it a running checksum of the entries since the last
// one, before raft replicates it. A follower's log store keeps the same sum
// over what it stored, and when the checkpoint arrives compares the two,
// then reads the range back from its disk and compares again, on a
// goroutine of its own. Every member also reads back its own range, the
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
// verifiedLog therefore starts a fresh verifier at every tail removal: its
// next range starts after it, and a follower whose range differs from the
// leader's checks what it reads back only.

package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/verifier"
)

// DefaultLogVerifyInterval is how often the leader appends a checkpoint
// when Config.LogVerifyInterval is zero (Consul's default is a minute; a
// checkpoint is one small entry, and the follower reads back at most what
// was written since the last one).
const DefaultLogVerifyInterval = 30 * time.Second

// isCheckpoint says which entries carry the verifier's sums: raft's
// barriers, which the leader appends at the start of every term and on
// the verify timer.
func isCheckpoint(l *raft.Log) (bool, error) { return l.Type == raft.LogBarrier, nil }

// noWALMetrics drops raft-wal's own counters; the report is counted in
// corenode_log_verifications_total.
type noWALMetrics struct{}

func (noWALMetrics) IncrementCounter(string, uint64) {}
func (noWALMetrics) SetGauge(string, uint64)         {}

// verifiedLog is raft's log store below the log cache (which keeps the
// very entries the verifier stamps, so the leader replicates the stamp):
// the verifier, replaced by a fresh one whenever raft removes the log's
// tail (see the package comment above).
//
// Concurrency: raft appends and removes the tail from its main goroutine
// only (a follower's appendEntries and installSnapshot, the leader's
// loop), so a swap never races an append; head compaction (the snapshot
// goroutine) leaves the sums alone. Reads go to whichever verifier is
// current, all of which read the same store.
type verifiedLog struct {
	cur   atomic.Pointer[verifier.LogStore]
	inner raft.LogStore
	fresh func() *verifier.LogStore
}

func (n *Node) newVerifiedLog(s raft.LogStore) *verifiedLog {
	v := &verifiedLog{inner: s, fresh: func() *verifier.LogStore {
		// The verifier closes a store that is an io.Closer when it is
		// closed; the swap must not close the member's store.
		return verifier.NewLogStore(struct{ raft.LogStore }{s}, isCheckpoint, n.verified, noWALMetrics{})
	}}
	v.cur.Store(v.fresh())
	return v
}

func (v *verifiedLog) FirstIndex() (uint64, error)            { return v.inner.FirstIndex() }
func (v *verifiedLog) LastIndex() (uint64, error)             { return v.inner.LastIndex() }
func (v *verifiedLog) GetLog(index uint64, l *raft.Log) error { return v.inner.GetLog(index, l) }
func (v *verifiedLog) StoreLog(l *raft.Log) error             { return v.cur.Load().StoreLogs([]*raft.Log{l}) }
func (v *verifiedLog) StoreLogs(logs []*raft.Log) error       { return v.cur.Load().StoreLogs(logs) }

// IsMonotonic passes the store's answer through (see timedLogStore).
func (v *verifiedLog) IsMonotonic() bool { return isMonotonic(v.inner) }

func (v *verifiedLog) DeleteRange(min, max uint64) error {
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
func (v *verifiedLog) Close() { v.cur.Load().Close() }

// verified receives the verifier's report of each checkpoint's range, on
// the verifier's goroutine, one at a time.
func (n *Node) verified(r verifier.VerificationReport) {
	var mismatch verifier.ErrChecksumMismatch
	switch {
	case r.Err == nil:
		n.metrics.verifications.WithLabelValues("ok").Inc()
		n.log.Debug("raft log verified", "range", r.Range.String(), "took", r.Elapsed)
	case errors.Is(r.Err, verifier.ErrRangeMismatch):
		// The range was compacted away before it could be read back:
		// nothing is known either way.
		n.metrics.verifications.WithLabelValues("incomplete").Inc()
	case errors.As(r.Err, &mismatch):
		n.metrics.verifications.WithLabelValues("mismatch").Inc()
		n.log.Error(fmt.Sprintf("this member's raft log does not match the leader's, so its state must not be trusted: "+
			"remove it from the cluster (etcdctl member remove %x), delete the data dir %s, then add it again "+
			"(etcdctl member add) and start it with --initial-cluster-state existing", n.cfg.ID, n.cfg.DataDir),
			"range", r.Range.String(), "err", r.Err)
	default:
		n.metrics.verifications.WithLabelValues("error").Inc()
		n.log.Warn("raft log verification could not read the range back", "range", r.Range.String(), "err", r.Err)
	}
}

// checkpointer is the leader service that appends a checkpoint every
// interval while this member leads.
type checkpointer struct {
	n *Node
}

func (c checkpointer) Run(ctx context.Context, _ uint64) {
	ticks, stop := c.n.ticker(c.n.cfg.LogVerifyInterval)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		// The barrier returns once applied; its error is a lost
		// leadership or a shutdown, and ctx says which soon enough.
		if err := await(ctx, c.n.raft.Barrier(c.n.cfg.ElectionTimeout*5)); err != nil && ctx.Err() == nil {
			c.n.log.Debug("log verification checkpoint not appended", "err", err)
		}
	}
}

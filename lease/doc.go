// Package lease holds corenode's leases: the replicated lease table that
// every member applies, and the leader-only Tracker that knows deadlines.
//
// How time works. Only the leader reads a clock (its monotonic one, through
// the Clock interface, so tests drive it exactly). The table never reads
// time: it keeps, per lease, the granted TTL and either nothing ("full": a
// new leader restarts the lease with its whole TTL) or a checkpointed expiry
// on the replicated *lease clock*. The lease clock is a number of
// milliseconds that only checkpoint entries advance; the leader proposes
// one every tick while any lease is checkpointed. A new leader continues the
// lease clock from the last value applied, so every checkpointed deadline
// resumes exactly where the last entry left it: a leader change extends a
// lease by at most the tick interval plus the time the cluster had no
// leader, never more, and never shortens it.
//
// Never early across leader changes rests on two rules, enforced by the
// caller of Tracker.Renew (lessor.Renew):
//  1. A keep-alive for a checkpointed lease is acknowledged only after a
//     reset (back to "full") is committed, so the next leader cannot restart
//     it from the stale checkpoint.
//  2. A keep-alive is acknowledged only after a quorum confirmed this
//     member's leadership after the request arrived (node.ReadBarrier,
//     shared by concurrent keep-alives). So no deposed leader acknowledges a
//     keep-alive after a new leader could have restarted the deadlines; the
//     new leader needs to add no overlap.
//
// Determinism: Table is a deterministic core, with no clock, goroutine or
// I/O; time reaches it only as the lease clock's value in a Checkpoint.
// Tracker reads time only from the Clock it was given (SystemClock in
// production) and starts no goroutine: whoever waits for its deadlines
// (package checkpoint) waits on that same clock. Checkpoint and Expire
// (codec.go) are the log commands the leader proposes from the tracker,
// encoded by hand because expiry storms run through them.
//
// Concurrency: Table is not safe for concurrent use; the FSM serializes it.
// Tracker is safe for concurrent use.
//
// Where it sits: a leaf of corenode's, importing only the standard library
// and protowire. fsm applies the table; checkpoint and lessor drive and
// read the tracker; readlease uses its Clock interface. It must never
// import kv (fsm coordinates keys and leases), node, fsm or anything above
// them.
package lease

// Package kv is corenode's MVCC key-value store: one cluster-wide revision,
// per-key create/mod revision, version and lease, history kept until
// compaction, and the watch hub that turns applied writes into events.
// It is the lowest package that knows etcd's request types, so it also
// answers, once for every rule that asks (auth, read leases, validation,
// apply, the space quota), which keys a request reads or writes: Touches.
//
// kv is deterministic: it reads no clock, draws no random numbers, starts no
// goroutine and does no I/O beyond the io.Reader/io.Writer handed to it for
// snapshots. Every write is decided by the order in which the caller (the
// Raft FSM) applies entries, so every member computes the same state.
//
// Concurrency contract: a Store is safe for concurrent use. Writes (Put,
// DeleteRange, Txn, Compact, DeleteKeys, Restore) are expected from a single
// goroutine, the FSM's apply loop, but are serialized internally anyway.
// Reads (Range, Rev, watch registration and resync) may run from any number
// of goroutines concurrently with writes and observe each write atomically.
package kv

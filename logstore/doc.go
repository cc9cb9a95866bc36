// Package logstore is one member's raft log and stable store, hardened:
// hashicorp/raft-wal (WAL, the default) or hashicorp/raft-boltdb (BoltDB)
// in the data dir, opened by Open as a Store that checks what it reads,
// refuses a damaged log before raft sees it, verifies its entries against
// the leader's, and survives a full disk under a running raft.
//
// # What a Store guarantees
//
// Durability. StoreLogs, StoreLog, Set and SetUint64 return nil only once
// what they wrote is durable: raft-wal writes the batch with a commit frame
// and fsyncs it; raft-boltdb commits a bolt transaction (two fdatasyncs).
// A failed write returns an error (and marks the Health, through Guard
// and Stable).
//
// Sums on entries. With the wal, every entry carries a CRC-32C of its
// index, term, type, data, extensions and append time (entrysum.go), kept
// in a trailer of raft.Log.Extensions and checked on every read: GetLog
// answers a changed entry with an error, never with other bytes or another
// index. raft never sees the trailer: entries are copied before it is
// added and it is removed on read. raft-boltdb keeps no sum per entry; its
// entries are checked by decoding them, and its file's structure at open.
//
// Checks at open. Open refuses, with a CorruptError that names the damage
// and the commands that replace the member:
//   - a bolt file (raft.db, or the wal's meta database) that bbolt would
//     panic or fault on: it is read page by page before bbolt opens it
//     (boltcheck.go), and an empty one is damage, not a new store;
//   - a wal that opens shorter than it was written: raft-wal stops reading
//     its newest segment at the first frame it cannot parse, so the store
//     keeps the index the log durably reached beside it and compares
//     (walstore.go);
//   - any entry that does not read back: every entry from first to last is
//     read, decoded and, for the wal, summed.
//
// It finishes a wal segment rotation that raft-wal left half done (which
// would otherwise refuse every append), creates a missing store whole or
// not at all, and refuses at once a data dir that another process holds
// (raft-wal and bbolt would wait for its lock forever) or that holds the
// other kind of store (MismatchError).
//
// Verification. A Verifier, below raft's log cache, has raft-wal's
// verifier stamp every raft barrier with a running sum of the entries
// since the last one, compare a follower's sum of what it stored with the
// leader's stamp, and read the range back from disk (verify.go). The
// member's leader appends the barriers; the results are counted in
// corenode_log_verifications_total, and a mismatch is logged with the
// steps that replace the member.
//
// Health and reopen. Guard and Stable mark a Health failed when raft's
// write fails (a full disk), ErrCannotPersist wrapping the cause. A term
// write, which raft panics on when it fails, instead waits for the disk
// once raft runs (Stable). Probe then tries the disk on a ticker, and once
// it takes an fsynced write, reopens the store under its write lock and
// clears the Health; raft's calls wait out the reopen and never see a
// closed store.
//
// # Concurrency, as hashicorp/raft 1.7 uses the store
//
// Every method of Store, Health and Stable may be called from any
// goroutine at once. raft calls its stores so:
//   - raft's main goroutine appends (StoreLogs: a leader's dispatchLogs, a
//     follower's appendEntries), removes the tail (DeleteRange up to the
//     last index: a follower's conflicting entries) and, after installing
//     or restoring a snapshot, the whole log (a monotonic store) or its
//     head, reads entries, and writes and reads the term and vote (Set,
//     SetUint64, Get, GetUint64);
//   - the snapshot goroutine removes the head (DeleteRange from the first
//     index, after a snapshot) and reads FirstIndex and LastIndex, while the
//     main goroutine appends;
//   - a leader's replication goroutine per follower reads entries (GetLog);
//   - the member's own goroutines read entries through raft's log cache.
//
// So appends and tail removals come from one goroutine at a time and never
// race each other; head removal and reads may run beside them. A Verifier,
// and the log store Guard returns, need no more than that: a Verifier swaps
// its sums at a tail removal, which no append can race. The wal's
// last-index record orders its writes with head and tail removals under a
// lock of its own.
//
// Every index is above zero; FirstIndex and LastIndex are 0 for an empty
// log. GetLog returns raft.ErrLogNotFound for an index the log does not
// hold. StoreLogs takes entries contiguous with the last one (the
// wal refuses a gap; IsMonotonic says so through every wrapper, and raft
// then clears the log after a snapshot instead of leaving a gap). The
// stable store's keys are raft's (CurrentTerm, LastVoteTerm, LastVoteCand)
// and the member's own; a key never set reads as 0 or empty, or, from
// raft-boltdb, with an error whose text is "not found".
//
// Close the Verifier, then the Store, after raft has shut down. A Store
// holds an exclusive lock on its files until it is closed.
//
// # Imports
//
// logstore imports hashicorp's raft, raft-wal and raft-boltdb, bbolt and
// the Prometheus client, and nothing of corenode's: never node, fsm, kv,
// lease, transport or member. package node stacks it under raft.
package logstore

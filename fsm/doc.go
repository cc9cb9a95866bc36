// Package fsm is corenode's raft.FSM: it decodes committed commands and
// applies them to the replicated state (kv's store, lease's table, auth's
// store, the members' records, the alarms and the read-lease record) in
// one deterministic step, and it snapshots and restores that state.
//
// Determinism: every member applies the same entries in the same order and
// must reach the same state, so apply reads no clock, draws no random
// number and starts no goroutine; what needs time (an expiry, a step of
// the lease clock) is decided by the leader and arrives as a command. A
// request is validated again where it applies, because concurrent
// proposals race: the NOSPACE quota (capped), the permission of the user a
// write acts for at the auth revision it was checked at (authorize), a
// lease's existence. An entry that does not decode stops the member (a
// panic) rather than be skipped, which would fork the state. The one
// member-local effect is auth's: applying Authenticate records a token in
// this member's token table, on auth's clock.
//
// Concurrency contract (hashicorp/raft's): Apply, ApplyBatch, Snapshot and
// Restore are called from raft's single FSM goroutine, never concurrently
// with each other. FSMSnapshot.Persist runs on another goroutine
// concurrently with later applies, so Snapshot captures an immutable view,
// as Contents does. Readers (Member, ClusterID, Lease, Leases, Store,
// Alarms, Applied, WaitApplied) may be called from any goroutine. A
// LeaseObserver is called on the apply goroutine with the lease table
// locked: it must not block or call back into the FSM.
//
// The log's format is defined here (command.go): Encode and EncodeAs write
// an entry (format version, op, etcd's request message), Decode reads one;
// op codes are part of the on-disk format and are never renumbered.
//
// An entry's path starts at ApplyBatch (fsm.go), which hands each command
// to applyCommand: decode, quota, permission, then kv, lease or auth.
//
// Where it sits: below node, whose raft instance calls it, and above the
// deterministic cores. It imports kv, lease, auth and hashicorp/raft. It
// must never import node, server, transport, lessor, checkpoint or
// readlease: apply does not reach back into the member, and the
// leader-only machinery reads the FSM, never the other way round.
package fsm

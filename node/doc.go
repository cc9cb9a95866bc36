// Package node is raft, proposals, leadership and membership for one
// corenode member: it runs the raft.Raft instance over the member's log
// store (package logstore) and state machine (package fsm), keeps the
// single proposal pipeline and the linearizable-read barrier, reacts to
// leadership changes with per-term leader services, and changes the
// membership (add, remove, promote, update). Package member wires a member
// around it: the listeners, the transports and the API.
//
// Everything that changes replicated state goes through Propose, so gates
// that must see every write (read leases) have one place to live.
//
// A member that cannot persist its raft state (a full disk; see package
// logstore's Health) neither leads nor campaigns: replication.go sends no
// vote requests and refuses a leadership transfer, propose.go answers a
// proposal its own disk refused with ErrNotLeader, and StorageErr reports
// it.
//
// node imports fsm, kv, auth, etcddb and logstore below it; never member,
// transport or any package of the edge above it.
package node

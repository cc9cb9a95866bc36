// Package checkpoint is the leader-only scheduler that turns the lease
// tracker's due work into batched proposals: checkpoints of remaining TTLs
// (with the lease clock and keep-alive resets), and expirations.
//
// It runs only while its member leads (node.LeaderService): it starts after
// the leader's barrier, so the tracker is built from an FSM that holds every
// earlier entry, and it stops proposing the moment leadership is lost. Its
// contract to the Lease API (package lessor, which owns the keep-alive
// rules) is two waits: AwaitCheckpoint, until the batch carrying a
// keep-alive's reset has committed or failed, and AwaitExpiry, until a
// lease whose time is up has left the tracker. All its time comes from the
// tracker's injected clock, so tests decide every wake-up.
//
// checkpoint imports only package lease of corenode's: the member reaches
// it through Proposer. It must never import node, fsm, lessor (which
// imports it), transport or gRPC.
package checkpoint

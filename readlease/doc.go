// Package readlease is the leader's side of read leases: a promise, handed
// to a client together with a value, that the value will not change before
// a deadline, so the client may answer reads of it from memory until then
// (client/cache is the other side).
//
// The promise rests on three arguments, named where the code relies on
// them:
//
//   - (A) Holder first. The client measures the lease from the moment it
//     sent its request, minus a drift margin; the leader measures it from the
//     moment it granted, which is later. Given clock rates that differ by
//     less than the margin, the holder stops serving before the leader stops
//     waiting.
//   - (B) Writes wait. A write that changes a leased key is proposed only
//     once every holder of the key has said it dropped the value, or the
//     last lease has run out. While it waits no new lease is granted on the
//     key (a read gets the value without a lease, or waits for the write
//     to apply: Manager.awaitWrites; either way readers never starve a
//     writer), and the grant reads the value under the same lock
//     that marks the write, so a grant either precedes the mark (and the
//     write waits for it) or follows the write's apply (and sees its value).
//   - (C) Terms do not overlap. A leader grants only within Window of the
//     start of a leadership confirmation (node.ReadBarrier): no successor can
//     be elected before that start. Before its first grant, a leader commits
//     that its term grants, with the horizon Duration + Window, so every
//     successor knows. A successor then waits the horizon plus a margin
//     before it proposes any write that could touch a key, so every lease of
//     its predecessors has run out first. After that wait it commits that
//     those terms are cleared, so the next leader need not wait again
//     unless a term since has granted (fsm.ReadLeaseState).
//
// Table is the deterministic core: no clock, goroutines or I/O; time comes
// in as arguments. Manager runs it on the leader: one term at a time (a
// node.LeaderService), gating every write (node.Gate: Admit) and running
// each holder's session (Open, then Session's Get, Ack, Release and Next).
//
// Its contract with the edge: readlease speaks no network. A session's
// requests come in as Get, Ack and Release calls and its messages go out
// as Message values, in the order Next returns them; the edge (transport)
// carries them over the cache protocol's gRPC stream and maps the errors
// (ErrNotLeader: relay the session to the leader; ErrLeaderChanged and an
// Answer's Err: the codes a client retries on; ErrEmptyKey: etcd's refusal
// of a read without a key) to gRPC codes.
//
// readlease must never import gRPC (google.golang.org/grpc and its status
// and codes), the cache protocol's generated code (api/cachepb), transport
// or node: the member reaches it through Node, the request layer (server)
// through Manager, and the edge through Session (server.CacheSession).
package readlease

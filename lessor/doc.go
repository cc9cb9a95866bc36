// Package lessor is the Lease API below the edge, as etcd's lessor is: the
// one place that answers LeaseGrant, LeaseRevoke, keep-alives (Renew),
// LeaseTimeToLive and LeaseLeases, counts them, and says why one failed.
//
// Its job is the rules a member applies to a lease request. Before raft:
// etcd's TTL bounds, the choice of a lease ID and its retry on a collision.
// On the leader, from its lease clock (lease.Tracker, driven by
// checkpoint.Scheduler): the time a lease has left, and the keep-alive
// rules of package lease (a keep-alive is acknowledged only after a quorum
// confirmed this member's leadership once it arrived, and only after the
// reset of a checkpointed lease committed; a lease whose time is up is
// answered "gone" only once its expiry applied).
//
// Its contract: every method takes a context and an etcd request and
// returns etcd's response without its header (the caller fills it) or an
// error of this package (ErrNotLeader, ErrTTLTooLarge), of package lease,
// or of its collaborators (the barrier's, the proposer's) unchanged, so an
// interface the server layer defines can capture the Lessor and the edge
// maps errors through one table. Leader-only methods (Renew, TimeToLive)
// return ErrNotLeader on a member that does not lead; the caller relays
// the request to the leader. ErrNotLeader is the one "not the leader"
// error of corenode's server side: node and readlease use the same value.
//
// lessor imports lease and checkpoint only of corenode's packages. It must
// never import node, fsm, kv, readlease, transport or gRPC's server side:
// raft, the state machine and the network reach it through the narrow
// interfaces below (Proposer, State, Barrier), which member wires.
package lessor

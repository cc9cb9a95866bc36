package lessor

import "errors"

// ErrNotLeader is corenode's one "not the leader" error: a leader-only
// answer was asked of a member that does not lead, or leads but has not
// yet taken over what the answer needs (the lease clock, a read-lease
// term). The caller asks the leader. node.ErrNotLeader and
// readlease.ErrNotLeader are this value.
//
// It lives here, not in node, because lessor is the lower of the two:
// it imports only lease and checkpoint, so node and readlease import it at
// no cost and with no cycle, whereas the Lease API importing node would
// pull raft, the FSM and the store under it.
var ErrNotLeader = errors.New("not the leader")

// ErrTTLTooLarge refuses a grant above lease.MaxTTL.
var ErrTTLTooLarge = errors.New("lessor: TTL is too large")

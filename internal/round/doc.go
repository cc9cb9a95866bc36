// Package round shares one answer among concurrent callers that each need an
// answer computed after they asked: a linearizable read needs a leadership
// confirmation (or a read index) whose questions were sent after the read
// began, so a caller may join a round that has not started yet, and never
// one already in flight.
//
// Its contract (Group): Do joins the next round that has not started and
// returns that round's answer, or ctx's error if ctx ends first, in which
// case the round still runs for the others. Rounds run one at a time, back
// to back while callers wait, on a goroutine of the group's own that exits
// when none waits, so an idle group costs nothing. Do is safe for
// concurrent use. A caller that gives up does not cancel the round's
// function, which other callers may share, so it must return on its own.
//
// Its users: node shares leadership confirmations (ReadBarrier) among
// concurrent reads and keep-alives, and server shares a follower's
// read-index round trips to the leader.
//
// Where it sits: a leaf, internal to this module. It imports only context
// and sync and knows nothing of raft; it must never import a corenode
// package, so that node and server can both use it.
package round

// Package integrity is the leader-only corruption check: the members hash
// their key space at a common revision (kv.Store.HashKV), and a member
// whose hash differs from the one a majority agrees on is named with a
// CORRUPT alarm, raised through raft, as etcd's periodic corruption check
// does. A corrupted member then refuses to answer reads (server.ErrCorrupt),
// so a flipped byte on one disk costs that member, not a wrong answer.
//
// The check catches state that diverged after it was written: a byte
// changed on disk under the log or a snapshot, a bug that applied an entry
// differently on one member. It cannot catch a write the leader itself
// applied wrongly everywhere.
//
// Its contract. Judge is the deterministic core: a pure function of the
// hashes and the number of voters, which decides nothing without a
// majority (two members of three that disagree, the third silent, cannot
// tell which of them is wrong). Checker runs rounds while its member leads,
// as a node.LeaderService: node starts Run after the new leader's barrier
// and cancels it the moment leadership is lost. Run's ticker is the only
// time the package reads; a round (Check) takes no time as input, so tests
// call it directly. Every call to Cluster comes from that one goroutine. A
// round compares the revision the leader had one round earlier, which every
// healthy follower has applied by then, so no round waits for one.
//
// A round is Checker.Check (check.go): hash here, ask each voter through
// Cluster.PeerHash, Judge, and raise CORRUPT for each member named.
//
// Where it sits: it imports kv only, for the hash's type and ErrCompacted.
// It must never import node, server, transport or fsm: it reaches its
// member and the others through Cluster, which member implements over the
// node and the request layer, so the check runs alike against the fake
// cluster of its tests.
package integrity

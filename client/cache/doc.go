// Package cache is the client's side of corenode's read leases: a cache of
// single keys that answers Get from memory while the leader has promised
// the value cannot change, and asks the leader otherwise.
//
// The leader answers each read with the value and a lease, a duration
// measured from when the client sent the request. A write to a leased key
// first asks every holder to drop it and waits for their acknowledgements
// (or for the last lease to run out), so a holder may serve the value from
// memory until its lease ends. One Cache keeps one long-lived session
// (a bidirectional stream, cache.proto's Cache.Session) with the leader. It
// opens the session on a connection to the leader's own client URL, found
// with the client's Status and MemberList calls, which saves the relay's
// hop on every invalidation; when that URL cannot be reached it goes
// through the client's connection to any member, and followers relay it.
//
// # The guarantee
//
// Get is linearizable: it never returns a value older than one that a
// completed write replaced (a write completes when its caller hears
// success), provided the client's and the leader's monotonic clocks run at
// rates that differ by less than the drift margin allows. It rests on four
// arguments, named where the code relies on them:
//
//   - (A) Holder first. An entry is served only before sendTime + lease -
//     margin, where sendTime is read on the client's monotonic clock before
//     the request is sent. The leader starts the lease when it grants it,
//     later, and the margin (DefaultDriftMargin: 1% of the lease plus 50 ms)
//     covers the clocks' difference in rate, so the cache stops serving
//     before the leader stops waiting.
//   - (B) Writes wait. The leader lets a write of a leased key through only
//     once the holder has acknowledged dropping it or the lease has run
//     out, and grants no new lease on the key while the write waits.
//   - (C) Terms do not overlap. A new leader waits out every lease its
//     predecessors could have granted before its first write. So entries
//     outlive a session that breaks (the leader changed, the network
//     failed), until their own deadlines; requests that were unanswered are
//     sent again on the next session.
//   - (D) In order. On one session the leader sends the answer that grants a
//     lease before any Invalidate that takes it back. The cache handles the
//     messages of a session in one goroutine, in order: it stores an answer
//     before it looks at the next message, and acknowledges an Invalidate
//     only after it has deleted the keys.
//
// No wall clock is read: a clock step does not matter, only the rate. The
// monotonic clock (Linux's CLOCK_MONOTONIC) runs through process pauses and
// most VM stalls, but not through a suspend of the whole machine; a client
// suspended for longer than a lease can wake and serve values that changed
// meanwhile, until the entries' deadlines on its own clock.
// docs/election.md discusses the same assumption for client/election.
//
// # Costs
//
// A hit costs a map lookup under a mutex. A miss is one round trip to the
// leader (a linearizable read there); concurrent misses of one key share a
// request. A value read while a write of its key waits comes without a
// lease and is used once. Writers pay too: a write of a key this cache
// holds waits for the invalidation's round trip, or, if this client cannot
// be reached, for the lease to run out. Close releases the leases of the
// current session: it drops every entry, then ends the stream cleanly,
// which the leader takes as the acknowledgement of every lease the session
// held (waiting up to a second for the leader to end it too). Memory is
// bounded by WithMaxKeys (least recently used entries go first).
//
// # Usage
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
//	if err != nil { ... }
//	c, err := cache.New(cli)
//	if err != nil { ... }
//	defer c.Close()
//	kv, err := c.Get(ctx, "/config/feature-x")
//	if err != nil { ... }
//	if kv == nil { ... } // no such key
//	use(kv.Value) // do not modify kv: it is shared
package cache

// Package election is the holders' side of leader election and locks on
// any etcd v3 endpoint, made safe against a holder that pauses.
//
// A holder that follows concurrency.Election's documentation acts as
// leader until its session notices the lease is gone; paused (GC, SIGSTOP,
// a VM stall) for longer than the TTL, it wakes up and acts once more after
// its successor has begun. Here the holder judges its lease on its own
// monotonic clock instead: Leading turns false at the send time of the last
// acknowledged keep-alive plus the TTL the issuer answered, minus a drift
// margin, which is before the issuer can expire the lease and elect a
// successor (assuming only that clock rates differ by less than the margin
// allows; no wall clock is read). For the pause between a check and the
// action that follows it, every leadership has a fencing token, the
// election key's create revision, which grows with each new leader: what
// the leader writes to checks it (Leadership.Guard for writes to the
// cluster itself).
//
//	l, err := election.Campaign(ctx, cli, "/my-service/leader", "host-a:8080")
//	if err != nil { ... }
//	defer l.Resign(context.Background())
//	for {
//		token, ok := l.Leading()
//		if !ok {
//			break // campaign again, or exit
//		}
//		doWork(l.Context(), token) // and pass token to what it writes to
//	}
//
// Keys and ordering are concurrency.Election's and concurrency.Mutex's, so
// holders of this package, of concurrency and of `etcdctl elect|lock`
// take turns on the same prefix. docs/election.md has the guarantee, its
// assumptions, and how to choose the TTL and margin.
package election

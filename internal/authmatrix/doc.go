// Package authmatrix runs every etcd v3 RPC as each of four callers
// (anonymous, bob, alice, root) against a cluster with auth enabled and
// reports what each got: "ok" or the error's text. Run against etcd 3.6 it
// gives the reference table that member's test holds corenode to
// (member/testdata/authmatrix.golden, made with `go run ./test/authmatrix
// -endpoints URL` against a fresh etcd).
//
// Its contract: Setup changes a fresh cluster's auth state as root (a
// role with readwrite on /svc/a/, alice holding it, bob holding nothing,
// keys on both prefixes with a lease each, a compaction, then AuthEnable);
// Run gives one Row per RPC, its outcomes in the order of Callers, root
// last so that its writes and revokes do not change what the others see;
// Format renders the rows as the golden file's text. Every call runs
// after the one before it has been answered, so the table is the same on
// every run; Run bounds each by ten seconds.
//
// The same code drives etcd and corenode, so a difference in the table is
// a difference in the servers. That is why it speaks only the wire API
// (clientv3 and etcd's API types) and must never import a corenode
// package. It is test support: member's tests and test/authmatrix use it.
package authmatrix

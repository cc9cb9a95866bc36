// Package nameserver answers DNS queries for the services registered in
// corenode, so that any program finds them with its system resolver or
// dig, without an etcd client: SERVICE.service.DOMAIN (or, as SRV lookups
// ask, _SERVICE._tcp.service.DOMAIN) has one SRV record per live endpoint
// and A/AAAA records for the endpoints that are IP addresses.
//
// The answers come from the member's own applied state (State), as a
// serializable read: see docs/discovery.md for the consistency this gives
// and why. The records are client/discovery's (etcd's naming/endpoints
// JSON), decoded here, and one that does not decode is skipped, as etcd's
// resolver skips it. When State refuses (the member has had no leader for
// too long, or is catching up after a restart) the query gets SERVFAIL, so
// resolvers move to another member. It answers its own zone only and
// never recurses.
//
// Concurrency: Start binds one address over UDP and TCP and serves each on
// a goroutine of its own until Close, which waits for both. Queries are
// answered concurrently, so State.Values is called from many goroutines
// at once; decoded records are cached by their bytes under a lock.
//
// A query's path is ServeDNS, answer and answerService (nameserver.go).
//
// Where it sits: beside the edge, under transport/ because it serves a
// network protocol, yet it imports no corenode package and no raft. It
// reads the member only through State, which member implements over the
// node's store (member/dns.go), and must never import node, kv, server or
// transport.
package nameserver

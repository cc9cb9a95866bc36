// Package member starts one corenode member from a Config: it opens the
// listeners, starts the node and serves the etcd v3 API, the peer port and
// the HTTP endpoints. The corenode command and the in-process cluster tests
// both start members through it, so tests exercise exactly what ships.
//
// Its one job is wiring: it is the composition root. Start (member.go)
// opens the ports and splits them with transport's muxes, then builds the
// parts and joins them through the narrow interfaces the lower packages
// define: the node (raft, the FSM, the log store) with the lease tracker;
// the request layer (server.New), given the edge's PeerClient as
// server.Peers and transport.Callers; the edge (transport.NewServer); the
// leader-only services (checkpoint's scheduler, integrity's check,
// readlease's manager, which is also the node's write gate); and the
// lessor, over the tracker, the scheduler, the FSM and the node's
// ReadBarrier. The adapters that let one package serve another's
// interface live here (proposer, integrityCluster, dnsState), so no
// package below imports one beside it. Then raft starts and the ports
// serve.
//
// Also here, because they need the whole member: joining a running cluster
// (join.go: the ID the member was added with, asked over the peer port),
// `corenode snapshot restore` (restore.go: etcd's or corenode's snapshot
// file into a new data dir), certificates for auto-TLS (selfcert.go,
// tls.go) and the DNS server over the applied state (dns.go).
//
// Its contract: Start returns once the member serves; the cluster may
// still be electing a leader. Ready is closed once the member has
// published itself through raft and caught up with the cluster, Removed
// once the cluster removed it. Close stops the member once, whoever calls
// it: client ports first, then the node (a leader hands leadership over),
// then the peer port. The member's own goroutines (serving, publishing,
// the DNS state's leader watch) end with Close.
//
// Where it sits: at the top of the library, below cmd/corenode alone. It
// imports every server-side package; none of them may import it, and
// only cmd/corenode and tests (member/membertest) do.
package member

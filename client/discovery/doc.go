// Package discovery keeps a service's endpoint registered in corenode (or
// any etcd v3 cluster) for as long as the service runs, under a lease, so
// that the endpoint disappears on its own when the service stops renewing
// it. Package discovery/resolver turns the registered endpoints into a gRPC
// resolver.
//
// Its contract is the storage format, which is etcd's
// go.etcd.io/etcd/client/v3/naming/endpoints: the key is service + "/" +
// addr (Key, Prefix) and the value is the JSON record endpoints.Manager
// writes (Decode). Services registered with etcd's manager are found by
// this package's readers, and etcd's manager and resolver find the
// endpoints registered here; the members' DNS server (package nameserver)
// reads the same records.
//
// Concurrency: Register blocks until the endpoint is stored or its first
// try fails (each try is bounded by WithTryTimeout), then starts one
// goroutine per Registration that keeps the lease alive, re-registers
// after a loss and revokes the lease at the end; Done is closed once it
// has exited. A Registration's methods are safe for concurrent use.
// WithNotify's function runs on that goroutine, one event at a time, and
// must not block.
//
// The key flow starts at Register (register.go): a grant and a put through
// endpoints.Manager, then run: clientv3's keep-alive until the lease is
// lost, re-registration with a back-off, and the revoke on the way out
// (skipped when the client was closed: the endpoint then expires).
//
// Where it sits: on the holders' side, speaking only the wire API, as
// every client/ package does. It imports clientv3 and etcd's naming
// package and nothing of corenode's, and must never import node,
// transport, server or any other server package, so a service that
// registers itself links no member code.
package discovery

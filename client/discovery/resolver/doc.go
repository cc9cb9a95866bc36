// Package resolver is a gRPC resolver for the scheme "corenode": a client
// dialing "corenode:///myservice" is given the live endpoints registered
// under the prefix "myservice/" (by discovery.Register or by etcd's
// endpoints.Manager), and follows them as they are registered, deregistered
// and expire.
//
//	b := resolver.NewBuilder(cli)
//	conn, err := grpc.NewClient("corenode:///myservice", grpc.WithResolvers(b), ...)
//
// Its contract with gRPC: each resolver that Build returns runs one
// goroutine, which lists the prefix, watches it from the listed revision,
// hands gRPC each endpoint set that differs from the last, and lists
// again when the watch fails (at once after a compaction or a watch that
// worked for a while, else after a back-off that ResolveNow cuts short).
// Only that goroutine calls gRPC's ClientConn, and Close waits for it, so
// nothing reaches gRPC after Close returns. Build does not block; a
// Builder is safe for concurrent use. A record that does not decode is
// left out, as etcd's resolver leaves it out. Closing the etcd client
// ends every resolver built on it, and gRPC hears of it.
//
// The flow starts in Builder.Build and runs in resolver.run and
// listAndWatch (resolver.go).
//
// Where it sits: it imports clientv3, gRPC's resolver API and package
// discovery (for the key prefix and the record format), and, like every
// client/ package, must never import a server package of corenode's.
package resolver

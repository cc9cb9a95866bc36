// Command corebench drives etcd v3 endpoints (etcd or corenode, it cannot
// tell them apart) with named workloads and prints summaries in the style of
// etcd's benchmark tool, so both systems are measured by the same client.
//
//	corebench put --endpoints a,b,c --total 10000 --val-size 256
//	corebench range --consistency s --total 10000
//	corebench expiry --leases 10000 --ttl 15 --json >>results.jsonl
//	corebench compare etcd.jsonl corenode.jsonl
//
// With --json the summary goes to stderr and one JSON line to stdout;
// compare turns two such files into a table of ratios.
//
// Its contract is fairness: every workload runs the same requests against
// either system, with etcd's benchmark flags and defaults (100 clients over
// 10 connections, connection i on endpoint i mod len), closed-loop, and
// dialing is not timed. A run that ends early still prints what it
// measured, and its exit status says the run was not clean.
//
// A run starts in main.go (runCommand: the shared flags, then the
// workload's own); each workload lives in its own file (kv.go, lease.go,
// watch.go, failover.go, ...), the closed loop and the connections in
// client.go, the summaries in report.go and compare.go.
//
// Where it sits: it is a client, not a member. Of corenode's packages it
// imports only client/cache and the cache protocol's types (api/cachepb),
// for the cached-read workloads; it must never import a server package,
// or it would no longer measure the two systems through the same code.
package main

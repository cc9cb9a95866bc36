// Package server is corenode's request layer, the counterpart of etcd's
// v3_server: below the edge (transport/, which decodes a call, calls this
// package, maps the error through its one table and fills the header) and
// above the node (raft, proposals, leadership, membership).
//
// It holds the rules a request goes through whichever port or codec
// brought it:
//
//   - the write pipeline (write.go): size, quota, identity, encode once,
//     propose on the leader or forward to it, answer once applied here;
//   - the linearizable read (read.go);
//   - forwarding to the leader and its retry policy, decided on typed
//     errors, never on an error's text (forward.go);
//   - request validation (kv's Check functions, called in kv.go) and the
//     read permissions (auth.go);
//   - the Lease API, run where it must run (lease.go: the rules are
//     lessor's; a follower relays keep-alives over Peers);
//   - alarms and the other maintenance calls (maintenance.go; the NOSPACE
//     alarm is raised in write.go), and membership (cluster.go).
//
// It speaks no gRPC. The edge reaches it through KV, Leases, Cluster and
// Maintenance, as etcd's v3rpc reaches RaftKV and Lessor; it reaches the
// leader through Peers and learns who a call acts for through Callers,
// both of which the edge implements. It never imports transport/.
package server

// Package transport is corenode's edge: the etcd v3 gRPC services and the
// read-lease cache protocol (api/cachepb), the peer port the members share
// for raft and for each other, the HTTP endpoints and etcd's JSON gateway.
// As with etcd's v3rpc over its server, the rules a request goes through
// (validation, permissions on keys, the write pipeline, forwarding and its
// retries) are not here but in the request layer, package server.
//
// A call is four steps here: decode it, call the request layer, map the
// error through the one table, fill the header with this member's view.
// Every call reaches the request layer through server.API, as v3rpc
// reaches RaftKV and Lessor: server.KV, Leases, Cluster and Maintenance
// for those services, Auth, Streams (RangeStream, Watch, the cache
// sessions), View (what headers and health answers say) and Peer (what
// other members ask of this one).
//
// The table is errTable (errors.go): mapErr turns an error from below into
// the gRPC error etcd sends, and both ports' interceptors pass every
// handler's error through it. peerclient.go reads the same table backwards (fromGRPC, in peerErr),
// so the leader's answer to a forwarded call comes back as the typed error
// it was there, and the request layer decides retries on types, not text.
//
// The edge implements what the request layer cannot see itself:
// server.Peers (PeerClient: connections to the other members, the streams
// to the leader) and server.Callers (Callers: who a call acts for, from
// its token or its certificate's name). Which credentials a method needs
// before its request is looked at is auth.go's table.
//
// Bytes on connections are the edge's too. A follower's forwarded writes
// travel on one stream per leader, gathered into frames (propose.go: the
// format and the leader's side; proposefollower.go: the follower's;
// proposeconn.go: the stream's own peer connection, or gRPC to a member of
// an earlier version; batch.go: who sends a frame), and its relayed
// keep-alives on one shared LeaseKeepAlive stream (leaserelay.go). mux.go
// splits each port by its first bytes: the peer port into raft's stream
// layer, member-to-member gRPC and proposal connections, the client port
// into gRPC and HTTP/1. http.go serves /health, /livez, /readyz, /version
// and /metrics; gateway.go serves etcd's JSON gateway, which calls this
// member's own gRPC server over an in-memory pipe (pipe.go), so a gateway
// request passes the same interceptors as a gRPC client's.
//
// A Put starts at kvService.Put (kv.go), a keep-alive at
// leaseService.LeaseKeepAlive (lease.go), and a write another member
// forwarded to this one as leader at serveProposalFrames (propose.go).
//
// Concurrency: gRPC serves each call on its own goroutine, and every type
// here that serves calls is safe for concurrent use; Server's setters are
// for before it serves. A keep-alive stream renews up to 256 leases at
// once, each on a goroutine of its own; the leader proposes each forwarded
// command on its own goroutine, which sends the answer itself unless a
// send is under way, whose goroutine then takes it along (frameBatcher);
// a Watch stream runs its receive, send, resync and progress loops
// apart.
//
// Where it sits: below member, which wires it, and above server. Of
// corenode's packages its non-test files import server, auth (a caller's
// identity, auth's errors) and api/cachepb only. It must never import
// node, fsm, kv, lease, checkpoint, lessor, readlease or integrity: the
// edge calls the request layer only.
package transport

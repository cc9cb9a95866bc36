// Package etcddb reads and writes etcd's backend file: the bbolt database
// etcd keeps its state in, which its Snapshot RPC streams (with a SHA-256
// appended) and `etcdctl snapshot save` stores. `corenode snapshot
// restore` reads etcd's backups with it, and corenode's Snapshot RPC
// writes one, so that etcd's own tools (`etcdutl snapshot status` and
// `restore`) take what a corenode user saves.
//
// The buckets are etcd's (server/storage/schema, the same from etcd 3.4 to
// 3.7), written with bbolt and etcd's own message types:
//
//	key        revision (8-byte big-endian main, '_', 8-byte sub), plus 't' for a deletion -> mvccpb.KeyValue
//	           (of a deletion only the key)
//	meta       consistent_index, term (8 bytes, big endian); scheduledCompactRev and
//	           finishedCompactRev (revision bytes); storageVersion (etcd 3.6 on)
//	lease      lease ID (8 bytes, big endian) -> leasepb.Lease {ID, TTL, RemainingTTL}
//	auth       authEnabled (one byte, 1 or 0), authRevision (8 bytes, big endian)
//	authUsers  name -> authpb.User;  authRoles  name -> authpb.Role
//	alarm, cluster, members, members_removed: the writing cluster's own, not carried
//
// Why not etcd's server/v3 packages (storage/backend, storage/schema,
// storage/mvcc), which write exactly this: they would link etcd's backend,
// lessor and auth store, zap and go.etcd.io/raft into corenode's binary
// and move raft-boltdb to the bbolt release etcd pins, for a layout of a
// few fixed keys that has not changed since etcd 3.4. What could drift is
// checked against etcd's own tools instead: testdata holds snapshots saved
// by etcd 3.4 to 3.7, and the end-to-end test restores what corenode
// writes with etcdutl and serves it with etcd. The one message not in
// etcd's api module, leasepb.Lease (etcd's server/lease/leasepb), is three
// int64 fields; it is encoded here with protowire.
//
// Its contract: Read (read.go) opens a file read-only and leaves it as it
// was; a file that is no bbolt database is ErrNotEtcd, and one whose pages
// etcd could not have written (cut short, or making bbolt panic while it
// is read) is ErrCorrupt. Export (write.go) writes fsm.Contents as an etcd
// 3.6 member's file whose name is gone from the directory once it is open,
// so nothing stays behind. The state moves as fsm.Contents both ways. No
// call keeps state or starts a goroutine; a File is for one reader at a
// time.
//
// Where it sits: beside the state machine, below node. It imports fsm, kv,
// lease and auth for the state they hold, and is imported by member
// (restore.go), node (the Snapshot RPC's file) and server. It must never
// import node, server, member or transport, which import it.
package etcddb

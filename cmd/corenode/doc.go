// Command corenode runs one member of a corenode cluster: a Raft-replicated
// consistent core that speaks the etcd v3 API.
//
//	corenode                      one-member cluster on 127.0.0.1:2379
//	corenode --name a ...         a member of a larger cluster (etcd's flags)
//	corenode health [--endpoint]  exit 0 if the member answers /health true
//	corenode snapshot restore F   seed a new cluster member from `etcdctl snapshot save` output
//	corenode lock NAME -- CMD     run CMD only while holding the lock NAME
//	corenode elect NAME V -- CMD  run CMD only while leading the election NAME with value V
//	corenode register SVC ADDR    keep ADDR registered for SVC while its health check passes
//
// Its job is the process, not the member: etcd's command line,
// environment (ETCD_<FLAG>, CORENODE_<FLAG>) and config file read through
// one table of every flag (flagtable.go, flags.go, configfile.go), checked
// and turned into a member.Config (memberconfig.go), with the initial
// cluster found by DNS or etcd's v3 discovery when asked (discovery.go,
// discoveryv3.go); the member's one logger, etcd's zap lines written
// through log/slog, and rotated if asked (logging.go, logrotate.go); the
// version (version.go); the signals and the exit status, the garbage
// collector's headroom (gc.go), and the subcommands that run beside a
// cluster rather than in it. Everything a member does is package member's, so the
// in-process cluster tests start exactly what this command starts.
//
// The flows. A member starts in run (main.go): flags, the logger,
// member.Start, then a wait for SIGINT, SIGTERM, the member's removal from
// the cluster or its failed start-up check, and Close. `lock` and `elect` (hold.go) hold a client/election leadership and
// run CMD under a watchdog, a second corenode process (watchdog.go) that
// stops CMD at the holder-side deadline even while the supervising process
// is paused, and is the init of CMD's PID namespace, so that nothing CMD
// started outlives the lock. `register` (register.go) keeps an endpoint registered through
// client/discovery while its health check passes. `snapshot restore`
// (main.go) seeds a new data dir from etcd's or corenode's snapshot file
// through member.Restore. The holder subcommands connect with etcdctl's
// flags and environment (conn.go).
//
// Where it sits: at the top; nothing imports it. It imports member to run
// a member; node, transport, logstore, server and auth only for flag
// defaults and parsing (log store names, the learner limit, the
// progress-notify default, the etcd API version, token kinds and bcrypt
// costs); clientv3 for etcd's v3 discovery; and client/election and
// client/discovery for
// the holder subcommands, which reach a cluster over the wire API like any
// other client.
package main

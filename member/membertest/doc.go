// Package membertest runs corenode clusters inside a test process: real
// gRPC, real raft and real BoltDB in temporary directories, on loopback.
//
// Its contract: every member starts through member.Start, as the corenode
// command starts one, so a test exercises what ships. The test-only
// choices are few and stated: ports from internal/freeport, bound before
// the member starts, so a stopped member restarts on its own address; a
// short ElectionTimeout, long enough not to flap under -race on two
// cores; warnings-only logs unless CORENODE_TEST_LOG=debug; no metrics
// registry, since members in one process would collide. Options change
// the rest (WithConfig, WithTLS, WithJWT), and certs.go makes throwaway
// certificate authorities so nothing secret lives in the repository.
//
// A Cluster is driven from the test's goroutine: its methods stop the test
// with t.Fatal on failure. New returns once the members agree on a leader;
// Stop and Restart stop and start one member, Join and Add add one as an
// operator would, and the test's cleanup closes the cluster, the leader
// first so it hands leadership to a member still running.
//
// Where it sits: test support for any package's tests. It imports member,
// auth (for JWT keys) and internal/freeport, and must never be imported
// by code that ships.
package membertest

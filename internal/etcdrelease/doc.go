// Package etcdrelease gives tests etcd's own binaries (etcd, etcdctl,
// etcdutl) of a pinned release, for the tests that hand etcd corenode's
// data or take etcd's. They are built from Go modules, as
// scripts/bench-vs-etcd builds its etcd, once per machine: they are kept
// in the user's cache directory (${XDG_CACHE_HOME:-~/.cache}/corenode/
// etcd-VERSION/, where scripts/bench-vs-etcd keeps its etcd too).
//
// Its contract: Build returns the paths of the three binaries, or stops
// the test through testenv.Unavailable (a skip on a developer's machine, a
// failure in CI) when they cannot be built. Build blocks for as long as a
// build takes, a minute or two the first time on a machine. Concurrent test
// processes wait for one build on a file lock in the cache directory (an
// flock on Unix; elsewhere they may build at once), and each binary is
// built under a temporary name and renamed, so a build cut short leaves
// none half-written.
//
// Where it sits: test support, internal to this module. It imports testing
// and internal/testenv, nothing else of corenode's, and must never be
// imported by code that ships.
package etcdrelease

// This file is not part of corenode's module: scripts/etcd-robustness adds it
// to etcd's go.etcd.io/etcd/tests/v3/robustness/options package with
// `go test -overlay`, so that a run's seed also fixes the cluster options
// the package draws from its own random source (tick and election times,
// snapshot counts, compaction batch limits).

package options

import "math/rand"

// SeedForCorenode reseeds the package's random source.
func SeedForCorenode(seed int64) {
	internalRand = rand.New(rand.NewSource(seed))
}

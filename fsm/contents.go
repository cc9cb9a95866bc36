package fsm

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lease"
)

// Contents is the replicated state that a backup carries from one cluster
// to a new one, whichever format holds it (corenode's snapshot or etcd's
// backend file): every key with its history since the last compaction,
// the leases, and users, roles and the auth switch. The rest of a
// snapshot (members, alarms, the read-lease record) belongs to the cluster
// that wrote it and does not move.
type Contents struct {
	KV *kv.Snapshot
	// LeaseClock is the lease clock, in milliseconds, that checkpointed
	// leases' Expiry is on; Leases are ordered by ID.
	LeaseClock int64
	Leases     []lease.Lease
	Auth       auth.State
	// Applied is the raft index the state is as of; zero when the state
	// came from elsewhere.
	Applied uint64
}

// Contents captures the replicated state between two commands, as
// Snapshot does. It copies only pointers to immutable data, so it is cheap
// and may be read at leisure while later commands apply.
func (f *FSM) Contents() Contents {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	return Contents{
		KV:         f.store.Snapshot(),
		LeaseClock: f.leases.Clock(),
		Leases:     f.leases.Leases(),
		Auth:       f.auth.State(),
		Applied:    f.Applied(),
	}
}

// Seed writes c to dst in corenode's snapshot format as the first state of
// a new cluster, as Reseed does for a corenode snapshot: as of raft index
// index, with clusterID, no published members and no alarms.
func Seed(c Contents, dst io.Writer, clusterID, index uint64, logger *slog.Logger) (SnapshotStats, error) {
	authState, err := c.Auth.Marshal()
	if err != nil {
		return SnapshotStats{}, fmt.Errorf("fsm: seed: %w", err)
	}
	f := New(logger, nil, nil)
	if err := f.auth.Restore(authState); err != nil {
		return SnapshotStats{}, fmt.Errorf("fsm: seed: %w", err)
	}
	f.store.Load(c.KV)
	f.leases.Restore(c.LeaseClock, c.Leases)
	return f.writeSeed(dst, clusterID, index)
}

package fsm

import (
	"fmt"
	"io"

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
// a new cluster: as of raft index index, with clusterID, and without what
// belonged to the old cluster's members (their published records, the
// alarms they raised), whose IDs are gone; the new members publish
// afresh. It writes c
// as it is, without building the state: the member started on it builds
// it once, when raft restores the snapshot, and a restore of a million
// keys from etcd's file should not pay for it twice.
func Seed(c Contents, dst io.Writer, clusterID, index uint64) (SnapshotStats, error) {
	authState, err := c.Auth.Marshal()
	if err != nil {
		return SnapshotStats{}, fmt.Errorf("fsm: seed: %w", err)
	}
	s := &snapshot{applied: index, clusterID: clusterID, leaseClock: c.LeaseClock, leases: c.Leases, auth: authState, kv: c.KV}
	if err := s.write(dst); err != nil {
		return SnapshotStats{}, fmt.Errorf("fsm: write seed snapshot: %w", err)
	}
	return SnapshotStats{Revision: c.KV.Rev(), Keys: c.KV.LiveKeys(), Leases: len(c.Leases)}, nil
}

package integrity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/kv"
)

// Cluster is what the check needs of its member and the others.
//
// Calls come from the check's one goroutine, never concurrently.
type Cluster interface {
	// Self is this member's ID.
	Self() uint64
	// Voters lists every voting member, this one included.
	Voters() ([]uint64, error)
	// LocalHash hashes this member's key space at rev (0: the current one).
	LocalHash(rev int64) (kv.KVHash, error)
	// PeerHash asks member id for its hash at rev. It returns
	// rpctypes.ErrGRPCFutureRev if id has not applied rev yet.
	PeerHash(ctx context.Context, id uint64, rev int64) (kv.KVHash, error)
	// Applied is this member's applied raft index.
	Applied() uint64
	// PeerApplied asks member id for its applied raft index and then its
	// revision, read in that order.
	PeerApplied(ctx context.Context, id uint64) (index uint64, rev int64, err error)
	// Corrupt reports whether id is already named corrupt.
	Corrupt(id uint64) bool
	// RaiseCorrupt names id corrupt; it returns once the alarm is applied.
	RaiseCorrupt(ctx context.Context, id uint64) error
}

// Judge finds the view a majority of voters agrees on and names the
// members whose view differs from it. Every view must be of the same
// revision and compact revision. With no majority among the views given
// it decides nothing (ok is false): two members out of three that
// disagree, with the third silent, cannot tell which of them is wrong.
func Judge[V comparable](views map[uint64]V, voters int) (majority V, corrupt []uint64, ok bool) {
	count := map[V]int{}
	for _, v := range views {
		count[v]++
	}
	for v, n := range count {
		if n > voters/2 {
			for id, w := range views {
				if w != v {
					corrupt = append(corrupt, id)
				}
			}
			slices.Sort(corrupt)
			return v, corrupt, true
		}
	}
	return majority, nil, false
}

// view is what a member says of the revision a round compares: its hash
// there, or, for a member that applied as far as the leader had then and
// yet never reached that revision, that it is short of it (short is its
// own ID, so two such members never count as agreeing).
type view struct {
	hash  uint32
	short uint64
}

// Checker runs the check while its member leads (node.LeaderService).
type Checker struct {
	c        Cluster
	interval time.Duration
	log      *slog.Logger
	// rev is the revision the next round compares: the leader's revision
	// one round earlier, which every healthy follower has applied by now,
	// so no round waits for a follower to catch up. at is the leader's
	// applied index, read after rev: a member of the same history that
	// applied as far has reached rev.
	rev int64
	at  uint64
}

// New returns a check of c every interval.
func New(c Cluster, interval time.Duration, logger *slog.Logger) *Checker {
	return &Checker{c: c, interval: interval, log: logger}
}

// Run implements node.LeaderService. Its ticker is the only time the check
// reads; a round itself takes no time as input, so tests call Check.
func (k *Checker) Run(ctx context.Context, term uint64) {
	k.rev = 0
	t := time.NewTicker(k.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := k.Check(ctx); err != nil && ctx.Err() == nil {
			k.log.Warn("corruption check round failed", "err", err)
		}
	}
}

// Check runs one round: it compares the members at the revision recorded
// by the previous round, raises CORRUPT for the members found to differ,
// and records the current revision for the next round. It returns the
// members it named.
func (k *Checker) Check(ctx context.Context) ([]uint64, error) {
	now, err := k.c.LocalHash(0)
	if err != nil {
		return nil, fmt.Errorf("integrity: hash this member: %w", err)
	}
	rev, at := k.rev, k.at
	k.rev, k.at = now.Revision, k.c.Applied()
	if rev == 0 {
		return nil, nil
	}
	own, err := k.c.LocalHash(rev)
	if errors.Is(err, kv.ErrCompacted) {
		return nil, nil // compacted since the last round; the next compares
	}
	if err != nil {
		return nil, fmt.Errorf("integrity: hash this member at %d: %w", rev, err)
	}
	voters, err := k.c.Voters()
	if err != nil {
		return nil, fmt.Errorf("integrity: list voters: %w", err)
	}
	views := map[uint64]view{k.c.Self(): {hash: own.Hash}}
	for _, id := range voters {
		if id == k.c.Self() {
			continue
		}
		h, err := k.c.PeerHash(ctx, id, rev)
		switch {
		case errors.Is(err, kv.ErrFutureRev) || errors.Is(err, rpctypes.ErrGRPCFutureRev):
			// Behind, or short: a member that applied the entries that
			// made rev here and holds fewer revisions applied another
			// history. Without this, such a member was never compared.
			index, peerRev, err := k.c.PeerApplied(ctx, id)
			if err == nil && index >= at && peerRev < rev {
				k.log.Warn("corruption check: member applied as far as the leader had at the revision compared, and holds fewer revisions",
					"member", fmt.Sprintf("%x", id), "revision", rev, "leader-index", at, "its-index", index, "its-revision", peerRev)
				views[id] = view{short: id}
			}
		case err != nil:
			k.log.Debug("corruption check: no hash from member", "member", fmt.Sprintf("%x", id), "revision", rev, "err", err)
		case h.CompactRevision != own.CompactRevision:
			// Not comparable: the member has not applied the same
			// compaction yet; a later round will compare.
		default:
			views[id] = view{hash: h.Hash}
		}
	}
	majority, corrupt, ok := Judge(views, len(voters))
	if !ok {
		if len(views) > 1 {
			k.log.Warn("corruption check: members disagree and no majority agrees", "revision", rev, "views", fmt.Sprint(views))
		}
		return nil, nil
	}
	var named []uint64
	for _, id := range corrupt {
		if k.c.Corrupt(id) {
			continue
		}
		k.log.Error("corruption check: member's data differs from the majority's; raising CORRUPT",
			"member", fmt.Sprintf("%x", id), "revision", rev, "its-hash", views[id].hash, "short", views[id].short != 0, "majority-hash", majority.hash)
		if err := k.c.RaiseCorrupt(ctx, id); err != nil {
			return named, fmt.Errorf("integrity: raise CORRUPT for %x: %w", id, err)
		}
		named = append(named, id)
	}
	return named, nil
}

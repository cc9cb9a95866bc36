package integrity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

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
	// Corrupt reports whether id is already named corrupt.
	Corrupt(id uint64) bool
	// RaiseCorrupt names id corrupt; it returns once the alarm is applied.
	RaiseCorrupt(ctx context.Context, id uint64) error
}

// Judge finds the hash a majority of voters agrees on and names the
// members whose hash differs from it. Every hash must be of the same
// revision and compact revision. With no majority among the hashes given
// it decides nothing (ok is false): two members out of three that
// disagree, with the third silent, cannot tell which of them is wrong.
func Judge(hashes map[uint64]kv.KVHash, voters int) (majority uint32, corrupt []uint64, ok bool) {
	count := map[uint32]int{}
	for _, h := range hashes {
		count[h.Hash]++
	}
	for sum, n := range count {
		if n > voters/2 {
			for id, h := range hashes {
				if h.Hash != sum {
					corrupt = append(corrupt, id)
				}
			}
			slices.Sort(corrupt)
			return sum, corrupt, true
		}
	}
	return 0, nil, false
}

// Checker runs the check while its member leads (node.LeaderService).
type Checker struct {
	c        Cluster
	interval time.Duration
	log      *slog.Logger
	// rev is the revision the next round compares: the leader's revision
	// one round earlier, which every healthy follower has applied by now,
	// so no round waits for a follower to catch up.
	rev int64
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
	rev := k.rev
	k.rev = now.Revision
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
	hashes := map[uint64]kv.KVHash{k.c.Self(): own}
	for _, id := range voters {
		if id == k.c.Self() {
			continue
		}
		h, err := k.c.PeerHash(ctx, id, rev)
		switch {
		case err != nil:
			k.log.Debug("corruption check: no hash from member", "member", fmt.Sprintf("%x", id), "revision", rev, "err", err)
		case h.CompactRevision != own.CompactRevision:
			// Not comparable: the member has not applied the same
			// compaction yet; a later round will compare.
		default:
			hashes[id] = h
		}
	}
	majority, corrupt, ok := Judge(hashes, len(voters))
	if !ok {
		if len(hashes) > 1 {
			k.log.Warn("corruption check: members disagree and no majority agrees", "revision", rev, "hashes", hashes)
		}
		return nil, nil
	}
	var named []uint64
	for _, id := range corrupt {
		if k.c.Corrupt(id) {
			continue
		}
		k.log.Error("corruption check: member's data differs from the majority's; raising CORRUPT",
			"member", fmt.Sprintf("%x", id), "revision", rev, "its-hash", hashes[id].Hash, "majority-hash", majority)
		if err := k.c.RaiseCorrupt(ctx, id); err != nil {
			return named, fmt.Errorf("integrity: raise CORRUPT for %x: %w", id, err)
		}
		named = append(named, id)
	}
	return named, nil
}

package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/kv"
)

// hashPeers is what the initial corruption check asks of the cluster.
type hashPeers interface {
	Self() uint64
	Voters() ([]uint64, error)
	LocalHash(rev int64) (kv.KVHash, error)
	PeerHash(ctx context.Context, id uint64, rev int64) (kv.KVHash, error)
}

// initialCheck is etcd's InitialCorruptCheck (--experimental-initial-
// corrupt-check): this member's hash at its revision against each voter's
// at the same revision. A different hash at the same compaction point is
// corruption, here or there, and the member refuses to serve, as etcd's
// does; a peer that cannot answer (behind, compacted, down) is only
// logged, as in etcd, since a member must be able to start without all.
func initialCheck(ctx context.Context, c hashPeers, log *slog.Logger) error {
	self := c.Self()
	log.Info("starting initial corruption check", "local-member-id", fmt.Sprintf("%x", self))
	h, err := c.LocalHash(0)
	if err != nil {
		return fmt.Errorf("%x failed to fetch hash: %w", self, err)
	}
	voters, err := c.Voters()
	if err != nil {
		return fmt.Errorf("initial corruption check: %w", err)
	}
	mismatch := 0
	for _, id := range voters {
		if id == self {
			continue
		}
		fields := []any{"local-member-id", fmt.Sprintf("%x", self), "local-member-revision", h.Revision,
			"local-member-compact-revision", h.CompactRevision, "local-member-hash", h.Hash, "remote-peer-id", fmt.Sprintf("%x", id)}
		p, err := c.PeerHash(ctx, id, h.Revision)
		switch {
		case errors.Is(err, rpctypes.ErrGRPCFutureRev) || errors.Is(err, kv.ErrFutureRev):
			log.Warn("cannot fetch hash from slow remote peer", append(fields, "err", err)...)
		case errors.Is(err, rpctypes.ErrGRPCCompacted) || errors.Is(err, kv.ErrCompacted):
			log.Warn("cannot fetch hash from remote peer; local member is behind", append(fields, "err", err)...)
		case err != nil:
			log.Warn("cannot fetch hash from remote peer", append(fields, "err", err)...)
		case p.Hash == h.Hash:
		case p.CompactRevision == h.CompactRevision:
			log.Warn("found different hash values from remote peer", append(fields, "remote-peer-hash", p.Hash)...)
			mismatch++
		default:
			log.Warn("found different compact revision values from remote peer",
				append(fields, "remote-peer-compact-revision", p.CompactRevision)...)
		}
	}
	if mismatch > 0 {
		return fmt.Errorf("%x found data inconsistency with peers", self)
	}
	log.Info("initial corruption checking passed; no corruption", "local-member-id", fmt.Sprintf("%x", self))
	return nil
}

package holder

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/client/election"
	"github.com/corenode/corenode/internal/rateclock"
)

// Library is the holder that uses corenode's client/election: it leads
// while Leading says so, which turns false on its own clock before the
// server could expire its lease, and its fenced writes use Guard.
const Library = "library"

func init() { modes[Library] = campaignLibrary }

type library struct{ l *election.Leadership }

func campaignLibrary(ctx context.Context, cli *clientv3.Client, cfg Config, log *slog.Logger) (leadership, error) {
	opts := []election.Option{election.WithTTL(cfg.TTL), election.WithLogger(log)}
	if cfg.clock != nil {
		opts = append(opts, election.WithClock(electionClock{cfg.clock}))
	}
	l, err := election.Campaign(ctx, cli, cfg.Prefix, cfg.Name, opts...)
	if err != nil {
		return nil, fmt.Errorf("holder: campaign: %w", err)
	}
	return &library{l: l}, nil
}

// electionClock is a rate clock as an election.Clock.
type electionClock struct{ *rateclock.Clock }

func (c electionClock) At(t time.Time, f func()) election.Stopper { return c.Clock.At(t, f) }

func (l *library) leading() (int64, bool) { return l.l.Leading() }

func (l *library) done() <-chan struct{} { return l.l.Done() }

func (l *library) key() string { return l.l.Key() }

func (l *library) fencedWrite(ctx context.Context, key, value string) (bool, int64, error) {
	resp, err := l.l.Txn(ctx).Then(clientv3.OpPut(key, value)).Commit()
	if err != nil {
		return false, 0, fmt.Errorf("holder: fenced write: %w", err)
	}
	return resp.Succeeded, resp.Header.Revision, nil
}

func (l *library) resign(ctx context.Context) error {
	if err := l.l.Resign(ctx); err != nil {
		return fmt.Errorf("holder: resign: %w", err)
	}
	return nil
}

package holder

import (
	"context"
	"fmt"
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Naive is the holder that uses go.etcd.io/etcd/client/v3/concurrency the
// way its documentation shows: it leads from Campaign's return until its
// session's Done channel closes, which happens only once the client has
// learnt that the lease is gone (a keep-alive answered "not found", or
// keep-alives failed until the session gave up). A paused holder keeps
// acting after it wakes until then.
const Naive = "naive"

type naive struct {
	s *concurrency.Session
	e *concurrency.Election
}

func campaignNaive(ctx context.Context, cli *clientv3.Client, cfg Config, _ *slog.Logger) (leadership, error) {
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(cfg.TTL.Seconds())), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("holder: session: %w", err)
	}
	e := concurrency.NewElection(s, cfg.Prefix)
	// Campaign does not stop by itself when the session dies; a holder
	// whose lease is gone must not go on waiting on a key it lost.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	if err := e.Campaign(cctx, cfg.Name); err != nil {
		select {
		case <-s.Done():
			err = fmt.Errorf("the session ended: %w", err)
		default:
		}
		s.Close()
		return nil, fmt.Errorf("holder: campaign: %w", err)
	}
	return &naive{s: s, e: e}, nil
}

func (n *naive) leading() (int64, bool) {
	select {
	case <-n.s.Done():
		return n.e.Rev(), false
	default:
		return n.e.Rev(), true
	}
}

func (n *naive) done() <-chan struct{} { return n.s.Done() }

func (n *naive) key() string { return n.e.Key() }

// fencedWrite is the Txn a careful user of concurrency.Election writes by
// hand (etcd documents the election key's create revision as a fencing
// token): the naive holder acts late, but corenode refuses its writes.
func (n *naive) fencedWrite(ctx context.Context, key, value string) (bool, int64, error) {
	resp, err := n.s.Client().Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(n.e.Key()), "=", n.e.Rev())).
		Then(clientv3.OpPut(key, value)).
		Commit()
	if err != nil {
		return false, 0, fmt.Errorf("holder: fenced write: %w", err)
	}
	return resp.Succeeded, resp.Header.Revision, nil
}

func (n *naive) resign(ctx context.Context) error {
	err := n.e.Resign(ctx)
	n.s.Close()
	if err != nil {
		return fmt.Errorf("holder: resign: %w", err)
	}
	return nil
}

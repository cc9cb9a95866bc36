package election

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/corenode/corenode/member/membertest"
)

// testTTL is the shortest TTL a membertest cluster grants unraised (1.5
// election timeouts round up to a second).
const testTTL = time.Second

// within fails the test unless ch delivers within d.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing within %v", what, d)
		var zero T
		return zero
	}
}

func campaignAsync(ctx context.Context, cli *clientv3.Client, prefix, value string, opts ...Option) <-chan *Leadership {
	ch := make(chan *Leadership, 1)
	go func() {
		l, err := Campaign(ctx, cli, prefix, value, opts...)
		if err != nil {
			l = nil
		}
		ch <- l
	}()
	return ch
}

// TestInteropWithConcurrency: a concurrency.Election campaigner and this
// package's take turns on one prefix, and each observes the other as leader.
func TestInteropWithConcurrency(t *testing.T) {
	c := membertest.New(t, 3)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s, err := concurrency.NewSession(cli, concurrency.WithTTL(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	theirs := concurrency.NewElection(s, "/interop")
	if err := theirs.Campaign(ctx, "theirs"); err != nil {
		t.Fatal(err)
	}

	won := campaignAsync(ctx, cli, "/interop", "ours", WithTTL(testTTL))
	select {
	case <-won:
		t.Fatal("Campaign returned while concurrency.Election leads")
	case <-time.After(300 * time.Millisecond):
	}
	if err := theirs.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	l := within(t, won, 10*time.Second, "Campaign after the other resigned")
	if l == nil {
		t.Fatal("Campaign failed")
	}
	token, ok := l.Leading()
	if !ok || token <= theirs.Rev() {
		t.Fatalf("Leading() = %d, %v; want true and a token above the predecessor's %d", token, ok, theirs.Rev())
	}
	resp, err := theirs.Leader(ctx)
	if err != nil || string(resp.Kvs[0].Value) != "ours" || resp.Kvs[0].CreateRevision != token {
		t.Fatalf("concurrency sees leader %v (err %v), want ours with create revision %d", resp, err, token)
	}
	obs := Observe(ctx, cli, "/interop")
	if got := within(t, obs, 5*time.Second, "Observe"); string(got.Kvs[0].Value) != "ours" {
		t.Fatalf("Observe sees %q, want ours", got.Kvs[0].Value)
	}

	// Now concurrency waits for us, and Observe follows the handover.
	theirTurn := make(chan error, 1)
	go func() { theirTurn <- theirs.Campaign(ctx, "theirs-again") }()
	select {
	case err := <-theirTurn:
		t.Fatalf("concurrency.Election won while this package leads (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Leading(); ok {
		t.Fatal("Leading() true after Resign")
	}
	if err := within(t, theirTurn, 5*time.Second, "concurrency Campaign after Resign"); err != nil {
		t.Fatal(err)
	}
	if got := within(t, obs, 5*time.Second, "Observe after handover"); string(got.Kvs[0].Value) != "theirs-again" {
		t.Fatalf("Observe sees %q after the handover, want theirs-again", got.Kvs[0].Value)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrResigned) {
		t.Fatalf("cause after Resign = %v, want ErrResigned", cause)
	}
}

// TestLostWhenKeyDeleted: deleting the holder's key ends the leadership at
// once, and the guarded Txn stops committing.
func TestLostWhenKeyDeleted(t *testing.T) {
	c := membertest.New(t, 1)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	l, err := Campaign(ctx, cli, "/del", "v", WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := l.Txn(ctx).Then(clientv3.OpPut("/fenced", "1")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("guarded put while leading: succeeded=%v err=%v", resp != nil && resp.Succeeded, err)
	}
	if _, err := cli.Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	within(t, l.Done(), 5*time.Second, "Done after the key was deleted")
	if _, ok := l.Leading(); ok {
		t.Fatal("Leading() true after Done")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrKeyDeleted) {
		t.Fatalf("cause = %v, want ErrKeyDeleted", cause)
	}
	resp, err = l.Txn(ctx).Then(clientv3.OpPut("/fenced", "2")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("guarded put after the key was deleted: succeeded=%v err=%v, want not committed", resp != nil && resp.Succeeded, err)
	}
	got, err := cli.Get(ctx, "/fenced")
	if err != nil || string(got.Kvs[0].Value) != "1" {
		t.Fatalf("/fenced = %v (err %v), want 1", got, err)
	}
}

// TestLockExcludes: a Lock excludes a second Lock and a concurrency.Mutex
// on the same name until it is released.
func TestLockExcludes(t *testing.T) {
	c := membertest.New(t, 1)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	first, err := Lock(ctx, cli, "/lk", WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := concurrency.NewMutex(s, "/lk").TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("concurrency TryLock while held: %v, want ErrLocked", err)
	}
	second := make(chan *Leadership, 1)
	go func() {
		l, err := Lock(ctx, cli, "/lk", WithTTL(5*time.Second))
		if err != nil {
			t.Error(err)
		}
		second <- l
	}()
	select {
	case <-second:
		t.Fatal("second Lock returned while the first holds")
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	l := within(t, second, 5*time.Second, "second Lock after release")
	if l == nil {
		t.FailNow()
	}
	if tok, ok := l.Leading(); !ok || tok <= first.Token() {
		t.Fatalf("second holder Leading() = %d, %v; want true, above %d", tok, ok, first.Token())
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCampaignCancelled: a campaign given up releases its key, so it does
// not block the holders queued behind it.
func TestCampaignCancelled(t *testing.T) {
	c := membertest.New(t, 1)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leader, err := Campaign(ctx, cli, "/cc", "a", WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	queued := cli.Watch(ctx, "/cc/", clientv3.WithPrefix(), clientv3.WithRev(leader.Token()+1))
	cctx, ccancel := context.WithCancel(ctx)
	waiting := make(chan error, 1)
	go func() { _, err := Campaign(cctx, cli, "/cc", "b", WithTTL(5*time.Second)); waiting <- err }()
	within(t, queued, 5*time.Second, "the second campaigner's key")
	ccancel()
	if err := within(t, waiting, 5*time.Second, "cancelled Campaign"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Campaign: %v, want context.Canceled", err)
	}
	resp, err := cli.Get(ctx, "/cc/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 1 {
		t.Fatalf("keys under /cc/ after the cancelled campaign: %v (err %v), want only the leader's", resp.Count, err)
	}
	_ = leader.Resign(ctx)
}

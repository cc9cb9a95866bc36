package node

import (
	"context"
	"errors"
	"testing"
)

// neverFuture is a raft future still queued when raft shut down: raft
// never answers it.
type neverFuture struct{}

func (neverFuture) Error() error { select {} }

// A leader service waiting on a future raft will never answer must still
// return once its term ends, or Close waits for it forever.
func TestAwaitReturnsWhenTheTermEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- await(ctx, neverFuture{}) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("await = %v, want context.Canceled", err)
	}
}

type answered struct{ err error }

func (a answered) Error() error { return a.err }

func TestAwaitReturnsTheFuturesAnswer(t *testing.T) {
	want := errors.New("leadership lost")
	if err := await(context.Background(), answered{want}); err != want {
		t.Fatalf("await = %v, want %v", err, want)
	}
}

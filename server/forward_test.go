package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRetryDecidesOnTypedErrors(t *testing.T) {
	unreachable := &Unreachable{Err: errors.New("connection reset by peer")}
	cases := []struct {
		err               error
		write, idempotent bool
	}{
		{ErrNotLeader, true, true},
		{fmt.Errorf("propose: %w", ErrNotLeader), true, true},
		{ErrNotSent, true, true},
		{unreachable, false, true},
		{errAbandoned, false, true},
		{ErrLeaderChanged, false, false}, // a stream broke after the write left
		{errors.New("etcdserver: key not found"), false, false},
	}
	for _, c := range cases {
		if got := retry(c.err, false); got != c.write {
			t.Errorf("retry(%v) of a write = %v, want %v", c.err, got, c.write)
		}
		if got := retry(c.err, true); got != c.idempotent {
			t.Errorf("retry(%v) of an idempotent call = %v, want %v", c.err, got, c.idempotent)
		}
	}
}

// A leader that stops answering is waited for only grace after this member
// saw the leader change, not until the request's deadline.
func TestForwardGivesUpGraceAfterTheLeaderChanged(t *testing.T) {
	s := &Server{grace: 50 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	changed := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		<-sent
		close(changed)
	}()
	_, err := forward(s, ctx, changed, func(ctx context.Context) (int, error) {
		close(sent)
		<-ctx.Done() // never answers
		return 0, ctx.Err()
	})
	if !errors.Is(err, errAbandoned) {
		t.Fatalf("forward = %v, want %v", err, errAbandoned)
	}
	if ctx.Err() != nil {
		t.Fatal("the call waited for its deadline rather than for grace")
	}
}

// Calls of one term share one abandonment; a new term gets its own.
func TestAbandonmentIsSharedWithinATerm(t *testing.T) {
	s := &Server{grace: time.Hour}
	term1, term2 := make(chan struct{}), make(chan struct{})
	a, b := s.abandonment(term1), s.abandonment(term1)
	if a != b {
		t.Fatal("two calls of one term got different abandonments")
	}
	if c := s.abandonment(term2); c == a {
		t.Fatal("a new term reused the last one's abandonment")
	}
	if a.Err() != nil {
		t.Fatal("abandoned before the leader changed")
	}
}

// An answer that comes in time is returned as it came.
func TestForwardReturnsTheAnswer(t *testing.T) {
	s := &Server{grace: time.Hour}
	want := errors.New("etcdserver: key not found")
	if _, err := forward(s, context.Background(), make(chan struct{}), func(context.Context) (int, error) { return 0, want }); err != want {
		t.Fatalf("forward = %v, want %v", err, want)
	}
	v, err := forward(s, context.Background(), make(chan struct{}), func(context.Context) (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Fatalf("forward = %d, %v; want 7, nil", v, err)
	}
}

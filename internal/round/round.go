package round

import (
	"context"
	"sync"
)

// Group runs one round at a time of its function and hands each round's
// answer to every caller that joined before the round started. A caller
// that arrives while a round runs joins the next one, which starts as soon
// as the running one ends; so under load one round serves many callers and
// rounds follow each other back to back, and an idle group runs nothing.
//
// Concurrency: Do may be called from any number of goroutines. fn runs on a
// goroutine of the group's own, one call at a time; it must return (it is
// not cancelled when callers give up, since other callers may share it).
type Group[T any] struct {
	fn func() (T, error)

	mu      sync.Mutex
	next    *call[T] // the round callers join now; nil if none is waiting
	running bool     // a goroutine is running rounds
}

type call[T any] struct {
	done chan struct{}
	val  T
	err  error
}

// New returns a group whose rounds call fn.
func New[T any](fn func() (T, error)) *Group[T] {
	return &Group[T]{fn: fn}
}

// Do joins the next round that has not started and returns its answer, or
// ctx's error if ctx ends first (the round still runs for the others).
func (g *Group[T]) Do(ctx context.Context) (T, error) {
	g.mu.Lock()
	if g.next == nil {
		g.next = &call[T]{done: make(chan struct{})}
	}
	c := g.next
	if !g.running {
		g.running = true
		go g.run()
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// run starts the waiting round, and the next, until none waits.
func (g *Group[T]) run() {
	for {
		g.mu.Lock()
		c := g.next
		g.next = nil
		if c == nil {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		c.val, c.err = g.fn()
		close(c.done)
	}
}

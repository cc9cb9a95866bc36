package node

import "sync"

// signal wakes every goroutine waiting for "something changed": Wait
// returns a channel that closes at the next Notify. A waiter takes the
// channel before it looks at the state it waits on, so a change between
// the look and the wait still wakes it; no change is missed, and nobody
// polls.
//
// The zero value is ready to use; all methods are safe for concurrent use.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait returns a channel closed at the next Notify.
func (s *signal) Wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Notify wakes every waiter.
func (s *signal) Notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

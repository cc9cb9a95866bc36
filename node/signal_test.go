package node

import "testing"

func TestSignal(t *testing.T) {
	var s signal
	a := s.Wait()
	b := s.Wait()
	select {
	case <-a:
		t.Fatal("closed before Notify")
	default:
	}
	s.Notify()
	for _, c := range []<-chan struct{}{a, b} {
		select {
		case <-c:
		default:
			t.Fatal("a waiter taken before Notify was not woken")
		}
	}
	c := s.Wait()
	select {
	case <-c:
		t.Fatal("a waiter taken after Notify was woken by it")
	default:
	}
	s.Notify()
	s.Notify() // with nobody waiting: nothing to close twice
	<-c
}

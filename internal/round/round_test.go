package round

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// A caller that arrives while a round runs never gets that round's answer:
// it gets a later round's, which started after it asked.
func TestCallerJoinsOnlyARoundNotStarted(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	n := 0
	g := New(func() (int, error) {
		n++ // rounds run one at a time, so no lock is needed
		if n == 1 {
			close(started)
			<-release
		}
		return n, nil
	})
	ctx := context.Background()
	first := make(chan int)
	go func() { v, _ := g.Do(ctx); first <- v }()
	<-started
	// Round 1 is running: whatever these get, it is not round 1.
	var wg sync.WaitGroup
	late := make(chan int, 3)
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); v, _ := g.Do(ctx); late <- v }()
	}
	close(release)
	if v := <-first; v != 1 {
		t.Fatalf("first caller got round %d, want 1", v)
	}
	wg.Wait()
	close(late)
	for v := range late {
		if v < 2 {
			t.Fatalf("a caller that arrived during round 1 got round %d", v)
		}
	}
}

// No round runs without a caller waiting for it.
func TestEveryRoundServesACaller(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	rounds := 0
	g := New(func() (int, error) {
		rounds++
		if rounds == 1 {
			close(started)
			<-release
		}
		return rounds, nil
	})
	ctx := context.Background()
	go g.Do(ctx)
	<-started
	var wg sync.WaitGroup
	got := make(chan int, 50)
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); v, _ := g.Do(ctx); got <- v }()
	}
	// Every caller blocks in Do before round 1 ends only if it got there;
	// those that did share round 2, the others a round after it. Each
	// round serves at least one caller, so 50 callers need at most 50
	// rounds; sharing shows as fewer.
	close(release)
	wg.Wait()
	close(got)
	seen := map[int]int{}
	for v := range got {
		seen[v]++
	}
	if rounds-1 > len(seen) {
		t.Fatalf("%d rounds ran for %d distinct answers: a round ran with no caller", rounds-1, len(seen))
	}
}

func TestErrorReachesEveryCallerOfTheRound(t *testing.T) {
	boom := errors.New("boom")
	g := New(func() (int, error) { return 0, boom })
	if _, err := g.Do(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("got %v, want %v", err, boom)
	}
}

func TestCallerGivesUpOnItsContext(t *testing.T) {
	release := make(chan struct{})
	g := New(func() (int, error) { <-release; return 7, nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Do(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// The round still completes for whoever joins it.
	done := make(chan int)
	go func() { v, _ := g.Do(context.Background()); done <- v }()
	close(release)
	if v := <-done; v != 7 {
		t.Fatalf("got %d, want 7", v)
	}
}

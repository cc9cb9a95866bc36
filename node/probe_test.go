package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// countingProber answers every probe with term at once, except for the
// members in silent, which never answer (until the round gives up).
type countingProber struct {
	term   uint64
	silent map[raft.ServerAddress]bool

	mu    sync.Mutex
	calls map[raft.ServerAddress]int
}

func (p *countingProber) Term(ctx context.Context, addr raft.ServerAddress) (uint64, error) {
	p.mu.Lock()
	p.calls[addr]++
	p.mu.Unlock()
	if p.silent[addr] {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return p.term, nil
}

func (p *countingProber) count(addr raft.ServerAddress) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[addr]
}

// followerAddrs returns the leader's followers' addresses in configuration
// order, which is the order a round without history asks them in.
func followerAddrs(t *testing.T, leader *Node) []raft.ServerAddress {
	t.Helper()
	f := leader.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	var addrs []raft.ServerAddress
	for _, s := range f.Configuration().Servers {
		if s.ID != ServerID(leader.ID()) {
			addrs = append(addrs, s.Address)
		}
	}
	return addrs
}

// TestConfirmationAsksAQuorumOnly: with every voter answering at once, a
// round of a 3-member leader asks one follower, not both.
func TestConfirmationAsksAQuorumOnly(t *testing.T) {
	nodes := startInmem(t, 3)
	leader := nodes[waitLeader(t, nodes)]
	p := &countingProber{term: leader.Term(), calls: map[raft.ServerAddress]int{}}
	leader.SetTermProber(p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const rounds = 20
	for range rounds {
		if err := leader.ReadBarrier(ctx); err != nil {
			t.Fatalf("read barrier: %v", err)
		}
	}
	time.Sleep(100 * time.Millisecond) // probes still starting are counted too
	total := 0
	for _, a := range followerAddrs(t, leader) {
		total += p.count(a)
	}
	// A hedge may fire now and then on a loaded machine; asking both
	// followers every round would be 2*rounds.
	if total > rounds+rounds/2 {
		t.Fatalf("%d rounds asked %d times, want about one follower a round", rounds, total)
	}
}

// TestConfirmationHedgesPastASilentVoter: the follower asked first never
// answers; the round asks the other after the hedge delay and confirms,
// and later rounds ask the silent one last, so they do not wait for it.
func TestConfirmationHedgesPastASilentVoter(t *testing.T) {
	nodes := startInmem(t, 3)
	leader := nodes[waitLeader(t, nodes)]
	addrs := followerAddrs(t, leader)
	silent, other := addrs[0], addrs[1]
	p := &countingProber{term: leader.Term(), calls: map[raft.ServerAddress]int{}, silent: map[raft.ServerAddress]bool{silent: true}}
	leader.SetTermProber(p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := leader.ReadBarrier(ctx); err != nil {
		t.Fatalf("read barrier with one follower silent: %v", err)
	}
	if p.count(silent) != 1 || p.count(other) != 1 {
		t.Fatalf("first round asked the silent follower %d times and the other %d, want 1 and 1", p.count(silent), p.count(other))
	}
	if d := time.Since(start); d >= leader.cfg.ElectionTimeout {
		t.Fatalf("first round took %v: it waited for the silent follower instead of hedging", d)
	}
	for range 10 {
		if err := leader.ReadBarrier(ctx); err != nil {
			t.Fatalf("read barrier: %v", err)
		}
	}
	if n := p.count(silent); n != 1 {
		t.Fatalf("the silent follower was asked %d times in 11 rounds, want once: it should go last", n)
	}
}

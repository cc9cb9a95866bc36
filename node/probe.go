package node

import (
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Asking every other voter for its term on each leadership confirmation
// costs a heartbeat round trip per voter, on the leader and on each of
// them; under a stream of linearizable reads or keep-alives those rounds
// run back to back and were a quarter of a 3-member leader's CPU. A round
// needs answers from a quorum only, so it asks just enough voters, the
// quickest to answer lately, and asks the rest only when one of those
// fails to answer or has not answered after a short hedge delay. Which
// members answer does not change what an answer proves (each is that
// member's word after the round began), so this changes the cost of a
// round, not its meaning.

const (
	// minProbeHedge and maxProbeHedge bound how long a round waits for
	// the voters it asked before it asks the others too.
	minProbeHedge = time.Millisecond
	maxProbeHedge = 10 * time.Millisecond
)

// probeStats remembers how quickly each voter answered term probes.
//
// Concurrency: safe for concurrent use.
type probeStats struct {
	mu      sync.Mutex
	latency map[raft.ServerID]time.Duration // smoothed; absent: never asked
}

// order returns voters sorted quickest first; a voter never asked comes
// first, so that it gets measured.
func (s *probeStats) order(voters []raft.Server) []raft.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(voters)
	slices.SortStableFunc(out, func(a, b raft.Server) int {
		return int(s.latency[a.ID] - s.latency[b.ID])
	})
	return out
}

// hedge returns how long to wait for the voters asked before asking the
// others: three times the slowest of them lately, within bounds.
func (s *probeStats) hedge(asked []raft.Server) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var slowest time.Duration
	for _, v := range asked {
		slowest = max(slowest, s.latency[v.ID])
	}
	return min(max(3*slowest, minProbeHedge), maxProbeHedge)
}

// slowProbe is the latency recorded for a voter that did not answer in
// time or could not be asked: it sorts after every measured one.
const slowProbe = time.Hour

// answered records that id answered after d, smoothed with what it took
// before unless it was recorded slow.
func (s *probeStats) answered(id raft.ServerID, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.latency[id]; ok && old != slowProbe {
		d = (3*old + d) / 4
	}
	s.setLocked(id, max(d, 1)) // at least 1 ns: asked at least once
}

// failed records that id did not answer in time or could not be asked,
// which sends it to the back.
func (s *probeStats) failed(id raft.ServerID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(id, slowProbe)
}

func (s *probeStats) setLocked(id raft.ServerID, d time.Duration) {
	if s.latency == nil {
		s.latency = map[raft.ServerID]time.Duration{}
	}
	s.latency[id] = d
}

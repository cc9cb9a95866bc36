package node

import (
	"testing"

	"github.com/hashicorp/raft"
)

func voter(id string) raft.Server {
	return raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id), Suffrage: raft.Voter}
}

func nonvoter(id string) raft.Server {
	return raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id), Suffrage: raft.Nonvoter}
}

// TestQuorum feeds a round its answers in order and checks the verdict of
// each, in the manner of raft's commitment_test.go.
func TestQuorum(t *testing.T) {
	const term = 5
	tests := []struct {
		name    string
		servers []raft.Server
		self    string
		asks    int       // voters to ask besides self
		already bool      // confirmed before anyone is asked
		answers []uint64  // terms, 0 for no word
		want    []verdict // after each answer
	}{
		{name: "one voter, self", servers: []raft.Server{voter("a")}, self: "a", asks: 0, already: true},
		{name: "three voters: self and one more", servers: []raft.Server{voter("a"), voter("b"), voter("c")}, self: "a", asks: 2,
			answers: []uint64{term}, want: []verdict{confirmed}},
		{name: "three voters: no word, then a word", servers: []raft.Server{voter("a"), voter("b"), voter("c")}, self: "a", asks: 2,
			answers: []uint64{0, term}, want: []verdict{noWord, confirmed}},
		{name: "older term is no word", servers: []raft.Server{voter("a"), voter("b"), voter("c")}, self: "a", asks: 2,
			answers: []uint64{term - 1, term}, want: []verdict{noWord, confirmed}},
		{name: "later term deposes", servers: []raft.Server{voter("a"), voter("b"), voter("c")}, self: "a", asks: 2,
			answers: []uint64{term + 1}, want: []verdict{deposed}},
		{name: "five voters need two more", servers: []raft.Server{voter("a"), voter("b"), voter("c"), voter("d"), voter("e")}, self: "a", asks: 4,
			answers: []uint64{term, 0, term}, want: []verdict{counted, noWord, confirmed}},
		{name: "non-voters neither asked nor counted",
			servers: []raft.Server{voter("a"), voter("b"), voter("c"), nonvoter("x"), nonvoter("y")}, self: "a", asks: 2,
			answers: []uint64{term}, want: []verdict{confirmed}},
		{name: "self not a voter: a quorum of the others",
			servers: []raft.Server{nonvoter("a"), voter("b"), voter("c"), voter("d")}, self: "a", asks: 3,
			answers: []uint64{term, term}, want: []verdict{counted, confirmed}},
		{name: "four voters need three", servers: []raft.Server{voter("a"), voter("b"), voter("c"), voter("d")}, self: "a", asks: 3,
			answers: []uint64{term, term}, want: []verdict{counted, confirmed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, others := newQuorum(tt.servers, raft.ServerID(tt.self), term)
			if len(others) != tt.asks {
				t.Fatalf("%d voters to ask, want %d", len(others), tt.asks)
			}
			for _, s := range others {
				if s.ID == raft.ServerID(tt.self) || s.Suffrage != raft.Voter {
					t.Fatalf("asks %v", s)
				}
			}
			if q.confirmed() != tt.already {
				t.Fatalf("confirmed before asking: %v, want %v", q.confirmed(), tt.already)
			}
			for i, a := range tt.answers {
				if got := q.add(a); got != tt.want[i] {
					t.Fatalf("answer %d (term %d): %v, want %v", i, a, got, tt.want[i])
				}
			}
		})
	}
}

func TestQuorumMissing(t *testing.T) {
	q, _ := newQuorum([]raft.Server{voter("a"), voter("b"), voter("c"), voter("d"), voter("e")}, "a", 1)
	if m := q.missing(); m != 2 {
		t.Fatalf("missing %d, want 2", m)
	}
	q.add(1)
	q.add(1)
	q.add(1)
	if m := q.missing(); m != 0 {
		t.Fatalf("missing %d after a quorum and more, want 0", m)
	}
}

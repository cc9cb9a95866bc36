package fsm

import (
	"encoding/binary"
	"errors"
)

// The cluster's incarnation tells apart two histories that share a cluster
// ID. Member and cluster IDs derive from the token and the peer URLs, so a
// cluster bootstrapped again over lost data dirs (`--initial-cluster-state
// new`, the same token) has the IDs of the one it replaced, and raft's own
// checks pass between them: both logs start with the same configuration
// entry, and their early entries carry the same terms. Only a value chosen
// at random once per history tells them apart. The first leader of a
// history commits one (OpIncarnation); every member keeps it, in its
// snapshot and in its raft stable store (package node), and the raft
// stream's handshake refuses a peer of another incarnation (node/fence.go).

// Incarnation is OpIncarnation's payload.
type Incarnation struct {
	// ID is chosen at random by the proposer; never 0.
	ID uint64
}

// Marshal implements Message: the ID as a uvarint.
func (c *Incarnation) Marshal() ([]byte, error) { return binary.AppendUvarint(nil, c.ID), nil }

// Unmarshal implements Message.
func (c *Incarnation) Unmarshal(b []byte) error {
	id, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) || id == 0 {
		return errors.New("fsm: bad incarnation payload")
	}
	c.ID = id
	return nil
}

// Size implements Message.
func (c *Incarnation) Size() int {
	b, _ := c.Marshal()
	return len(b)
}

// Incarnation is the cluster's incarnation as of the applied state; 0
// until the first leader's entry applies.
func (f *FSM) Incarnation() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.incarnation
}

// OnIncarnation sets the function told of every incarnation the FSM takes
// on, from an applied entry or a restored snapshot. It is called on the
// apply goroutine; it must not call back into the FSM. Set it before raft
// starts.
func (f *FSM) OnIncarnation(fn func(uint64)) { f.onIncarnation = fn }

// applyIncarnation keeps the first incarnation a history commits: two
// leaders of a young cluster may each propose one, and every member must
// end with the same, and never pass through another on its way there.
func (f *FSM) applyIncarnation(c *Incarnation) uint64 {
	f.mu.Lock()
	if f.incarnation == 0 {
		f.incarnation = c.ID
	}
	inc := f.incarnation
	f.mu.Unlock()
	f.tellIncarnation(inc)
	return inc
}

func (f *FSM) tellIncarnation(inc uint64) {
	if f.onIncarnation != nil && inc != 0 {
		f.onIncarnation(inc)
	}
}

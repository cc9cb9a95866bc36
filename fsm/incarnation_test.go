package fsm

import (
	"io"
	"slices"
	"testing"
)

func TestIncarnationFirstCommittedWins(t *testing.T) {
	f := New(nil, nil, nil)
	var told []uint64
	f.OnIncarnation(func(inc uint64) { told = append(told, inc) })
	if got := f.Incarnation(); got != 0 {
		t.Fatalf("a new FSM's incarnation is %x, want 0", got)
	}
	apply(t, f, OpIncarnation, &Incarnation{ID: 0xa})
	// A second leader of a young cluster proposed one too: the first stays.
	apply(t, f, OpIncarnation, &Incarnation{ID: 0xb})
	if got := f.Incarnation(); got != 0xa {
		t.Fatalf("incarnation %x after a second proposal, want the first, a", got)
	}
	if want := []uint64{0xa, 0xa}; !slices.Equal(told, want) {
		t.Fatalf("OnIncarnation heard %x, want %x", told, want)
	}
	g := New(nil, nil, nil)
	var restored uint64
	g.OnIncarnation(func(inc uint64) { restored = inc })
	var sink memSink
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if err := g.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	if g.Incarnation() != 0xa || restored != 0xa {
		t.Fatalf("restored incarnation %x (told %x), want a", g.Incarnation(), restored)
	}
}

func TestIncarnationPayload(t *testing.T) {
	for _, c := range []Incarnation{{ID: 1}, {ID: 1<<64 - 1}} {
		b, _ := c.Marshal()
		var got Incarnation
		if err := got.Unmarshal(b); err != nil || got != c {
			t.Fatalf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
	for _, b := range [][]byte{nil, {0}, {0x80}, {1, 1}} {
		var c Incarnation
		if err := c.Unmarshal(b); err == nil {
			t.Fatalf("payload %v decoded as %+v, want an error", b, c)
		}
	}
}

package node

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/fsm"
)

func TestFenceAdmitsUnknownAndEqualIncarnations(t *testing.T) {
	f := NewFence(slog.New(slog.DiscardHandler))
	f.id.Store(1)
	if err := f.Admit(2, 0xb); err != nil {
		t.Fatalf("a member that knows no incarnation yet refused a peer: %v", err)
	}
	f.setIncarnation(0xa)
	for _, inc := range []uint64{0, 0xa} {
		if err := f.Admit(2, inc); err != nil {
			t.Fatalf("peer of incarnation %x refused: %v", inc, err)
		}
	}
	if err := f.Admit(2, 0xb); !errors.Is(err, ErrAnotherHistory) {
		t.Fatalf("peer of another incarnation: %v, want ErrAnotherHistory", err)
	}
}

// TestFenceHaltsOnlyWhenOutvoted: the member in the minority stops; the
// members of the majority refuse the odd one out and go on.
func TestFenceHaltsOnlyWhenOutvoted(t *testing.T) {
	voters := []uint64{1, 2, 3}
	survivor := NewFence(slog.New(slog.DiscardHandler))
	survivor.id.Store(1)
	survivor.setIncarnation(0xa)
	survivor.voters = func() []uint64 { return voters }
	pair := NewFence(slog.New(slog.DiscardHandler))
	pair.id.Store(2)
	pair.setIncarnation(0xb)
	pair.voters = func() []uint64 { return voters }

	if err := pair.Admit(1, 0xa); err == nil {
		t.Fatal("the pair admitted the survivor of another history")
	}
	if pair.HaltErr() != nil {
		t.Fatalf("one foreign voter of three halted the majority: %v", pair.HaltErr())
	}
	survivor.Admit(2, 0xb)
	if survivor.HaltErr() != nil {
		t.Fatal("halted on one foreign voter of three")
	}
	// A member met again with its own incarnation is no longer counted out.
	survivor.Admit(3, 0xa)
	survivor.Admit(3, 0xb)
	select {
	case <-survivor.Halted():
	default:
		t.Fatal("two of three voters of another incarnation, and the survivor did not halt")
	}
	var he *HistoryError
	if !errors.As(survivor.HaltErr(), &he) || he.ID != 1 {
		t.Fatalf("halt error %v, want a HistoryError of member 1", survivor.HaltErr())
	}
}

// TestFenceForgetsPeersWhenItsIncarnationChanges: after a replacement
// (--force-new-cluster) peers counted out against the old one are judged
// afresh.
func TestFenceForgetsPeersWhenItsIncarnationChanges(t *testing.T) {
	f := NewFence(slog.New(slog.DiscardHandler))
	f.id.Store(1)
	f.setIncarnation(0xa)
	f.voters = func() []uint64 { return []uint64{1, 2, 3} }
	f.Admit(2, 0xb)
	f.setIncarnation(0xb)
	f.Admit(3, 0xc)
	if f.HaltErr() != nil {
		t.Fatalf("halted on a peer counted against an incarnation this member no longer holds: %v", f.HaltErr())
	}
}

// TestCheckAppendRefusesReplacingAppliedEntries: raft would truncate the
// tail of a follower's log at the first entry whose term differs and keep
// the state already applied from it; the check refuses that for applied
// entries, and leaves raft's ordinary repair of unapplied ones alone.
func TestCheckAppendRefusesReplacingAppliedEntries(t *testing.T) {
	logs := raft.NewInmemStore()
	f := fsm.New(slog.New(slog.DiscardHandler), nil, nil)
	var mine []*raft.Log
	for i := uint64(1); i <= 4; i++ {
		data, err := fsm.Encode(fsm.OpPut, &pb.PutRequest{Key: []byte("k"), Value: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: data})
	}
	if err := logs.StoreLogs(mine); err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch(mine[:3]) // entry 4 is stored, not applied
	if err := logs.SetUint64(keyCurrentTerm, 3); err != nil {
		t.Fatal(err)
	}
	n := &Node{cfg: Config{ID: 1, DataDir: "/data"}, fsm: f, logs: logs, termStore: logs, fence: NewFence(slog.New(slog.DiscardHandler))}

	other := func(i, term uint64) *raft.Log {
		return &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte{1, byte(fsm.OpPut), 9}}
	}
	send := func(entries ...*raft.Log) error {
		return n.checkAppend(&raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("2")}, Term: 3, Entries: entries})
	}
	if err := send(mine[1], mine[2], mine[3]); err != nil {
		t.Fatalf("a resent append of the same entries: %v", err)
	}
	if err := send(other(4, 3), other(5, 3)); err != nil {
		t.Fatalf("replacing an entry not applied yet (raft's repair): %v", err)
	}
	if n.fence.HaltErr() != nil {
		t.Fatal("halted on raft's ordinary repair")
	}
	for _, e := range []*raft.Log{other(3, 3), other(3, 2)} { // another term; the same term, other data
		n.fence = NewFence(slog.New(slog.DiscardHandler))
		err := send(e)
		var he *HistoryError
		if !errors.As(err, &he) || n.fence.HaltErr() == nil {
			t.Fatalf("entry 3 of term %d replacing an applied one: %v (halted: %v), want a HistoryError and a halt", e.Term, err, n.fence.HaltErr())
		}
	}

	// A leader of an older term, deposed while it was cut off, sends the
	// entries it never committed where this member applied the new
	// leader's: raft refuses the append on its term, and the check must
	// not halt the majority for it (a split in jepsen-lite did).
	if err := logs.SetUint64(keyCurrentTerm, 4); err != nil {
		t.Fatal(err)
	}
	n.fence = NewFence(slog.New(slog.DiscardHandler))
	if err := send(other(3, 3)); err != nil || n.fence.HaltErr() != nil {
		t.Fatalf("an append of an older term than the member's: %v (halted: %v), want it left to raft", err, n.fence.HaltErr())
	}
}

// TestHistoryErrorNamesWALDir: a member halted for another history is told
// to delete its data dir and, with --wal-dir, the wal dir's contents too.
func TestHistoryErrorNamesWALDir(t *testing.T) {
	msg := (&HistoryError{What: "x", ID: 1, Dir: "/d", LogDir: "/w", Others: "2"}).Error()
	if want := "delete the data dir /d and the contents of the wal dir /w (--wal-dir)"; !strings.Contains(msg, want) {
		t.Errorf("%q does not say %q", msg, want)
	}
	msg = (&HistoryError{What: "x", ID: 1, Dir: "/d", Others: "2"}).Error()
	if want := "delete the data dir /d, "; !strings.Contains(msg, want) {
		t.Errorf("%q does not say %q", msg, want)
	}
}

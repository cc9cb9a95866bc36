package readlease

import (
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

const dur = 2 * time.Second

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func newTestTable() *Table {
	tb := NewTable(dur, Limits{MaxKeys: 100, MaxHoldersPerKey: 10}, t0)
	tb.AddHolder(1)
	tb.AddHolder(2)
	return tb
}

func noLeaseKeys(int64) [][]byte { return nil }

func key(s string) []byte { return []byte(s) }

func TestGrantAndWriteWaitsForEveryHolder(t *testing.T) {
	tb := newTestTable()
	if d := tb.Grant(1, key("a"), 0, at(0)); d != dur {
		t.Fatalf("grant = %v, want %v", d, dur)
	}
	if d := tb.Grant(2, key("a"), 0, at(100)); d != dur {
		t.Fatalf("second holder's grant = %v", d)
	}
	p, invs := tb.Begin(Write{Keys: [][]byte{key("a")}}, noLeaseKeys, at(500))
	if p.Ready() {
		t.Fatal("write ready while two holders hold the key")
	}
	if want := at(2100); !p.Until.Equal(want) {
		t.Fatalf("Until = %v, want the last deadline %v", p.Until, want)
	}
	if len(invs) != 2 {
		t.Fatalf("%d invalidations, want one per holder", len(invs))
	}
	// Argument B: no grant on the key while the write waits, not even a
	// renewal for a holder that was asked.
	if d := tb.Grant(1, key("a"), 0, at(600)); d != 0 {
		t.Fatalf("grant while a write waits = %v, want 0", d)
	}
	if r := tb.Ack(invs[0].Holder, invs[0].Seq); len(r) != 0 {
		t.Fatal("ready after one of two holders answered")
	}
	r := tb.Ack(invs[1].Holder, invs[1].Seq)
	if len(r) != 1 || r[0] != p || !p.Ready() {
		t.Fatalf("after both answered: ready %v", r)
	}
	// A repeated answer changes nothing.
	if r := tb.Ack(invs[1].Holder, invs[1].Seq); len(r) != 0 {
		t.Fatal("a repeated ack released something")
	}
	tb.End(p)
	if d := tb.Grant(1, key("a"), 0, at(700)); d != dur {
		t.Fatalf("grant after the write ended = %v, want %v", d, dur)
	}
	if tb.Len() != 1 {
		t.Fatalf("Len = %d, want 1", tb.Len())
	}
}

func TestWriteOnUnleasedKeyIsReadyAtOnce(t *testing.T) {
	tb := newTestTable()
	tb.Grant(1, key("a"), 0, at(0))
	p, invs := tb.Begin(Write{Keys: [][]byte{key("b")}}, noLeaseKeys, at(10))
	if !p.Ready() || len(invs) != 0 || !p.Until.Equal(t0) {
		t.Fatalf("ready %v, %d invalidations, until %v", p.Ready(), len(invs), p.Until)
	}
	// Yet grants on b stop until it ends.
	if d := tb.Grant(2, key("b"), 0, at(20)); d != 0 {
		t.Fatalf("grant on a key with a write in flight = %v", d)
	}
	tb.End(p)
	tb.End(p) // idempotent
	if d := tb.Grant(2, key("b"), 0, at(30)); d != dur {
		t.Fatalf("grant after End = %v", d)
	}
}

func TestExpiredLeaseNeedsNoAnswer(t *testing.T) {
	tb := newTestTable()
	tb.Grant(1, key("a"), 0, at(0))
	p, invs := tb.Begin(Write{Keys: [][]byte{key("a")}}, noLeaseKeys, at(2000))
	if !p.Ready() || len(invs) != 0 {
		t.Fatalf("a lease that ran out at 2000 held a write begun at 2000: ready %v, %d invalidations", p.Ready(), len(invs))
	}
	if tb.Len() != 0 {
		t.Fatalf("Len = %d after the lease ran out and was seen", tb.Len())
	}
}

func TestGoneHolderIsWaitedOutNotAsked(t *testing.T) {
	tb := newTestTable()
	tb.Grant(1, key("a"), 0, at(0))
	tb.RemoveHolder(1)
	if d := tb.Grant(1, key("b"), 0, at(1)); d != 0 {
		t.Fatalf("grant to a gone holder = %v", d)
	}
	p, invs := tb.Begin(Write{Keys: [][]byte{key("a")}}, noLeaseKeys, at(500))
	if p.Ready() || len(invs) != 0 || !p.Until.Equal(at(2000)) {
		t.Fatalf("ready %v, %d invalidations, until %v; want waiting until 2000 with nobody asked", p.Ready(), len(invs), p.Until)
	}
	if n := tb.Sweep(at(2000)); n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
	tb.Sweep(at(2000))
	if _, ok := tb.holders[1]; ok {
		t.Fatal("a gone holder with nothing held was kept")
	}
}

func TestRangesAndLeasesCoverKeys(t *testing.T) {
	tb := newTestTable()
	for _, k := range []string{"a", "b/1", "b/2", "c"} {
		tb.Grant(1, key(k), 0, at(0))
	}
	p, invs := tb.Begin(Write{Ranges: [][2][]byte{{key("b/"), key("b0")}}}, noLeaseKeys, at(10))
	if len(invs) != 1 || len(invs[0].Keys) != 2 || p.Ready() {
		t.Fatalf("range write: %+v, ready %v; want one invalidation of b/1 and b/2", invs, p.Ready())
	}
	if d := tb.Grant(2, key("b/3"), 0, at(20)); d != 0 {
		t.Fatal("granted inside a range being deleted")
	}
	if d := tb.Grant(2, key("c"), 0, at(20)); d != dur {
		t.Fatal("refused outside the range")
	}
	all, _ := tb.Begin(Write{Ranges: [][2][]byte{{key("c"), {0}}}}, noLeaseKeys, at(30))
	if all.Ready() {
		t.Fatal(`a range to "\x00" did not cover c`)
	}
	// A revoked lease covers its keys, and keys attached while it waits.
	rev, invs := tb.Begin(Write{Leases: []int64{7}}, func(id int64) [][]byte {
		if id != 7 {
			t.Fatalf("asked for the keys of lease %d", id)
		}
		return [][]byte{key("a")}
	}, at(40))
	if rev.Ready() || len(invs) != 1 {
		t.Fatalf("revoke: ready %v, %d invalidations", rev.Ready(), len(invs))
	}
	if d := tb.Grant(2, key("0z"), 7, at(50)); d != 0 {
		t.Fatal("granted a key attached to a lease being revoked")
	}
	if d := tb.Grant(2, key("0z"), 8, at(50)); d != dur {
		t.Fatal("refused a key attached to another lease")
	}
	tb.End(rev)
	if d := tb.Grant(1, key("0y"), 7, at(60)); d != dur {
		t.Fatal("still refusing after the revoke ended")
	}
}

func TestNewLeaderWaitsOutItsPredecessors(t *testing.T) {
	tb := NewTable(dur, Limits{MaxKeys: 10, MaxHoldersPerKey: 10}, at(2300))
	p, _ := tb.Begin(Write{Keys: [][]byte{key("a")}}, noLeaseKeys, at(0))
	if !p.Ready() || !p.NotBefore.Equal(at(2300)) || !p.Until.Equal(at(2300)) {
		t.Fatalf("ready %v, not before %v, until %v", p.Ready(), p.NotBefore, p.Until)
	}
}

func TestLimits(t *testing.T) {
	tb := NewTable(dur, Limits{MaxKeys: 2, MaxHoldersPerKey: 1}, t0)
	tb.AddHolder(1)
	tb.AddHolder(2)
	if tb.Grant(1, key("a"), 0, at(0)) == 0 {
		t.Fatal("first grant refused")
	}
	if tb.Grant(2, key("a"), 0, at(0)) != 0 {
		t.Fatal("second holder of a key granted past MaxHoldersPerKey 1")
	}
	if tb.Grant(1, key("b"), 0, at(0)) == 0 {
		t.Fatal("second key refused")
	}
	if tb.Grant(1, key("c"), 0, at(0)) != 0 {
		t.Fatal("third key granted past MaxKeys 2")
	}
	// Renewing a held lease needs no room.
	if tb.Grant(1, key("a"), 0, at(1000)) != dur {
		t.Fatal("renewal refused at the limit")
	}
	if tb.Sweep(at(2000)) != 1 || tb.Grant(2, key("c"), 0, at(2000)) == 0 {
		t.Fatal("room not freed by the sweep")
	}
}

func TestDisabledGrantsNothing(t *testing.T) {
	tb := NewTable(0, Limits{MaxKeys: 2, MaxHoldersPerKey: 1}, t0)
	tb.AddHolder(1)
	if tb.Grant(1, key("a"), 0, t0) != 0 {
		t.Fatal("granted with duration 0")
	}
}

// A holder that never answered may lease the key again once its old lease
// ran out (the write it held up went ahead at that deadline).
func TestSilentHolderLeasesAgainAfterItsLeaseRanOut(t *testing.T) {
	tb := newTestTable()
	tb.Grant(1, key("a"), 0, at(0))
	p, invs := tb.Begin(Write{Keys: [][]byte{key("a")}}, noLeaseKeys, at(100))
	if len(invs) != 1 {
		t.Fatal("no invalidation")
	}
	tb.End(p) // went ahead at its Until, unanswered
	if d := tb.Grant(1, key("a"), 0, at(1999)); d != 0 {
		t.Fatalf("renewed a lease the holder was asked to drop and did not: %v", d)
	}
	if d := tb.Grant(1, key("a"), 0, at(2000)); d != dur {
		t.Fatalf("grant after the unanswered lease ran out = %v, want %v", d, dur)
	}
	if tb.Len() != 1 {
		t.Fatalf("Len = %d", tb.Len())
	}
	// And the new lease holds the next write.
	if p, invs := tb.Begin(Write{Keys: [][]byte{key("a")}}, noLeaseKeys, at(2100)); p.Ready() || len(invs) != 1 {
		t.Fatalf("the renewed lease did not hold a write: ready %v, %d invalidations", p.Ready(), len(invs))
	}
}

// TestKeyNamedTwiceIsAskedOnce: a key a write names alone and in two
// overlapping ranges is asked for once, and one answer readies the write;
// End lets grants on every key it named resume.
func TestKeyNamedTwiceIsAskedOnce(t *testing.T) {
	tb := newTestTable()
	for _, k := range []string{"k/1", "k/2", "z"} {
		tb.Grant(1, key(k), 0, at(0))
	}
	w := Write{
		Keys:   [][]byte{key("k/1"), key("k/1")},
		Ranges: [][2][]byte{{key("k/"), key("k0")}, {key("k/1"), {0}}, {key("z"), key("a")}},
	}
	p, invs := tb.Begin(w, noLeaseKeys, at(10))
	if len(invs) != 1 {
		t.Fatalf("%d invalidations, want one to holder 1", len(invs))
	}
	got := map[string]int{}
	for _, k := range invs[0].Keys {
		got[string(k)]++
	}
	if len(got) != 3 || got["k/1"] != 1 || got["k/2"] != 1 || got["z"] != 1 {
		t.Fatalf("asked for %v, want k/1, k/2 and z once each (z through the open range)", got)
	}
	if ready := tb.Ack(1, invs[0].Seq); len(ready) != 1 || ready[0] != p || !p.Ready() {
		t.Fatalf("after the one answer: ready %v, p.Ready %v", ready, p.Ready())
	}
	if tb.Len() != 0 {
		t.Fatalf("%d leases left after the answer", tb.Len())
	}
	for _, k := range []string{"k/1", "k/3", "zz"} {
		if d := tb.Grant(2, key(k), 0, at(20)); d != 0 {
			t.Fatalf("granted %s while the write is in flight", k)
		}
	}
	if d := tb.Grant(2, key("a"), 0, at(20)); d != dur {
		t.Fatal("refused a key no range covers (the range z..a is empty)")
	}
	tb.End(p)
	for _, k := range []string{"k/1", "k/3", "zz"} {
		if d := tb.Grant(2, key(k), 0, at(30)); d != dur {
			t.Fatalf("refused %s after the write ended", k)
		}
	}
}

// A holder that released its leases holds no write up: one waiting for its
// answer is Ready on the release, and one that comes later does not wait
// for the leases it was never asked about. A holder whose session only
// broke (RemoveHolder) still binds writes until its deadlines.
func TestReleaseFreesTheHoldersLeases(t *testing.T) {
	tb := newTestTable()
	tb.AddHolder(3)
	for _, g := range []struct {
		h HolderID
		k string
	}{{1, "a"}, {1, "b"}, {2, "a"}, {3, "c"}} {
		if d := tb.Grant(g.h, key(g.k), 0, at(0)); d != dur {
			t.Fatalf("grant %q to %d = %v", g.k, g.h, d)
		}
	}
	p, invs := tb.Begin(Write{Keys: [][]byte{key("a")}}, noLeaseKeys, at(100))
	if len(invs) != 2 {
		t.Fatalf("%d invalidations, want one per holder", len(invs))
	}
	if r := tb.Release(1); len(r) != 0 {
		t.Fatal("ready on one release while holder 2 has not answered")
	}
	for _, inv := range invs {
		if inv.Holder == 2 {
			if r := tb.Ack(2, inv.Seq); len(r) != 1 || r[0] != p {
				t.Fatalf("after the release and holder 2's answer: ready %v, want the write", r)
			}
		}
	}
	tb.End(p)

	q, invs := tb.Begin(Write{Keys: [][]byte{key("b")}}, noLeaseKeys, at(200))
	if !q.Ready() || len(invs) != 0 {
		t.Fatalf("write of a released lease: ready %v, %d invalidations; want ready, none", q.Ready(), len(invs))
	}
	tb.End(q)
	if d := tb.Grant(1, key("b"), 0, at(300)); d != 0 {
		t.Fatalf("grant to a released holder = %v, want 0", d)
	}

	tb.RemoveHolder(3)
	r, invs := tb.Begin(Write{Keys: [][]byte{key("c")}}, noLeaseKeys, at(300))
	if r.Ready() || len(invs) != 0 || !r.Until.Equal(at(2000)) {
		t.Fatalf("write of a gone holder's lease: ready %v, %d invalidations, until %v; want to wait until %v",
			r.Ready(), len(invs), r.Until, at(2000))
	}
}

// A release while the holder's answer is all a write waits for makes the
// write Ready.
func TestReleaseReadiesTheWrite(t *testing.T) {
	tb := newTestTable()
	tb.Grant(1, key("a"), 0, at(0))
	p, _ := tb.Begin(Write{Keys: [][]byte{key("a")}}, noLeaseKeys, at(100))
	if r := tb.Release(1); len(r) != 1 || r[0] != p || !p.Ready() {
		t.Fatalf("after the release: ready %v, want the write", r)
	}
	if tb.Len() != 0 {
		t.Fatalf("%d leases held after the only holder released, want 0", tb.Len())
	}
}

package lease

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// fakeClock is read by the tracker alone, which never waits: NewTimer
// comes from the embedded nil Clock and would panic if it were called.
// The scheduler's fake, which fires timers, is in package checkpoint.
type fakeClock struct {
	Clock
	t time.Time
}

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestTracker() (*Tracker, *fakeClock) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	tr := NewTracker(c, TrackerConfig{CheckpointAfter: time.Second})
	tr.Promote(0, nil)
	return tr, c
}

func TestExpiryOrderAndNeverEarly(t *testing.T) {
	tr, c := newTestTracker()
	tr.Granted(3, 3)
	tr.Granted(1, 1)
	tr.Granted(2, 2)
	if got := tr.Expired(10); len(got) != 0 {
		t.Fatalf("expired %v at grant time", got)
	}
	c.advance(time.Second - time.Nanosecond)
	if got := tr.Expired(10); len(got) != 0 {
		t.Fatalf("expired %v a nanosecond before the first deadline", got)
	}
	c.advance(2 * time.Second)
	if got := tr.Expired(10); !reflect.DeepEqual(got, []int64{1, 2}) {
		t.Fatalf("expired %v, want [1 2] in deadline order", got)
	}
	if got := tr.Expired(10); len(got) != 0 {
		t.Fatalf("expired %v twice", got)
	}
	if d, ok := tr.NextDeadline(); !ok || !d.Equal(time.Unix(1003, 0)) {
		t.Fatalf("next deadline %v %v", d, ok)
	}
}

func TestExpiredRespectsLimitAndUnexpire(t *testing.T) {
	tr, c := newTestTracker()
	for id := int64(1); id <= 5; id++ {
		tr.Granted(id, 1)
	}
	c.advance(2 * time.Second)
	first := tr.Expired(3)
	if len(first) != 3 {
		t.Fatalf("got %d, want a batch of 3", len(first))
	}
	if r := tr.Renew(first[0]); r.TTL != 0 || !r.Due {
		t.Fatalf("a lease being expired must not be renewed, and is due: %+v", r)
	}
	tr.Unexpire(first)
	if got := tr.Expired(10); len(got) != 5 {
		t.Fatalf("after a failed proposal every due lease must be retried, got %v", got)
	}
}

func TestRenewOfUnknownLeaseIsNotDue(t *testing.T) {
	tr, c := newTestTracker()
	tr.Granted(7, 1)
	c.advance(2 * time.Second)
	if r := tr.Renew(7); !r.Due {
		t.Fatalf("past its deadline: %+v, want due", r)
	}
	tr.Removed(7)
	if r := tr.Renew(7); r.TTL != 0 || r.Due {
		t.Fatalf("after its expiry applied: %+v, want gone and not due", r)
	}
	if r := tr.Renew(8); r.TTL != 0 || r.Due {
		t.Fatalf("never granted: %+v, want gone and not due", r)
	}
}

// TestRenewAfterDemotionIsInactive: a renewal that reaches the tracker after
// leadership was lost says so, rather than "gone" (TTL 0), which would end
// a holder whose lease the next leader still keeps.
func TestRenewAfterDemotionIsInactive(t *testing.T) {
	tr, _ := newTestTracker()
	tr.Granted(7, 5)
	if r := tr.Renew(7); r.Inactive || r.TTL != 5 {
		t.Fatalf("while leading: %+v", r)
	}
	tr.Demote()
	if r := tr.Renew(7); !r.Inactive || r.Due {
		t.Fatalf("after demotion: %+v, want inactive", r)
	}
	if r := tr.Renew(8); !r.Inactive {
		t.Fatalf("unknown lease after demotion: %+v, want inactive", r)
	}
}

func TestRenewExtendsFromNow(t *testing.T) {
	tr, c := newTestTracker()
	tr.Granted(7, 5)
	c.advance(4 * time.Second)
	if r := tr.Renew(7); r.TTL != 5 || r.ResetSeq != 0 {
		t.Fatalf("renew: %+v", r)
	}
	c.advance(5*time.Second - time.Millisecond)
	if got := tr.Expired(10); len(got) != 0 {
		t.Fatal("expired before TTL passed since the last renewal")
	}
	if rem, ttl, ok := tr.Remaining(7); !ok || rem != 0 || ttl != 5 {
		t.Fatalf("remaining %d ttl %d ok %v", rem, ttl, ok)
	}
	c.advance(time.Millisecond)
	if r := tr.Renew(7); r.TTL != 0 || !r.Due {
		t.Fatalf("renewed at its deadline: must count as expired and due: %+v", r)
	}
	if got := tr.Expired(10); !reflect.DeepEqual(got, []int64{7}) {
		t.Fatalf("got %v", got)
	}
}

func TestCheckpointThenKeepAliveNeedsReset(t *testing.T) {
	tr, c := newTestTracker()
	tr.Granted(1, 10)
	if cp, _ := tr.TakeCheckpoint(100); cp != nil {
		t.Fatalf("nothing is due yet, got %+v", cp)
	}
	c.advance(1500 * time.Millisecond)
	cp, seq := tr.TakeCheckpoint(100)
	if cp == nil || len(cp.Expiries) != 1 || cp.Clock != 1500 {
		t.Fatalf("checkpoint %+v", cp)
	}
	if want := (Expiry{ID: 1, Expiry: 10000}); cp.Expiries[0] != want {
		t.Fatalf("expiry %+v, want %+v (deadline on the lease clock)", cp.Expiries[0], want)
	}
	// The first keep-alive after the checkpoint must wait for a reset that is
	// proposed after the checkpoint.
	r := tr.Renew(1)
	if r.TTL != 10 || r.ResetSeq != seq+1 {
		t.Fatalf("renew after checkpoint: %+v (checkpoint seq %d)", r, seq)
	}
	cp2, seq2 := tr.TakeCheckpoint(100)
	if seq2 != r.ResetSeq || !reflect.DeepEqual(cp2.Resets, []int64{1}) {
		t.Fatalf("reset batch %+v seq %d", cp2, seq2)
	}
	// A second keep-alive before the next checkpoint needs no reset.
	if r := tr.Renew(1); r.ResetSeq != 0 {
		t.Fatalf("second renew: %+v", r)
	}
}

// TestLeaderChangeBoundsExtension replays the replicated state into a new
// tracker, as a new leader does, and checks the deadline it restarts.
func TestLeaderChangeBoundsExtension(t *testing.T) {
	tr, c := newTestTracker()
	table := NewTable()
	if err := table.Grant(1, 10); err != nil {
		t.Fatal(err)
	}
	tr.Granted(1, 10)
	// The leader ticks every 100 ms; each checkpoint applies to the table.
	for range 40 {
		c.advance(100 * time.Millisecond)
		if cp, _ := tr.TakeCheckpoint(100); cp != nil {
			table.Apply(cp)
		}
	}
	// 4 s after the grant, leadership moves; the cluster is leaderless for 200 ms.
	c.advance(200 * time.Millisecond)
	tr.Demote()
	if got := tr.Expired(10); got != nil {
		t.Fatal("a demoted tracker decided an expiry")
	}
	next := NewTracker(c, TrackerConfig{CheckpointAfter: time.Second})
	next.Promote(table.Clock(), table.Leases())
	d, _ := next.NextDeadline()
	original := time.Unix(1010, 0)
	ext := d.Sub(original)
	if ext < 0 {
		t.Fatalf("new leader would expire the lease %v early", -ext)
	}
	if ext > 300*time.Millisecond {
		t.Fatalf("new leader extended the lease by %v, want at most tick + leaderless time", ext)
	}
}

func TestLeaderChangeKeepsUncheckpointedLeaseFull(t *testing.T) {
	tr, c := newTestTracker()
	table := NewTable()
	table.Grant(1, 10)
	tr.Granted(1, 10)
	c.advance(500 * time.Millisecond) // before CheckpointAfter
	next := NewTracker(c, TrackerConfig{})
	next.Promote(table.Clock(), table.Leases())
	d, _ := next.NextDeadline()
	if want := c.t.Add(10 * time.Second); !d.Equal(want) {
		t.Fatalf("deadline %v, want a full TTL from promotion (%v)", d, want)
	}
}

func TestPromoteCheckpointsUncheckpointedLeaseAtOnce(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	tr := NewTracker(c, TrackerConfig{CheckpointAfter: time.Second})
	tr.Promote(0, []Lease{{ID: 1, TTL: 10}, {ID: 2, TTL: 5, Expiry: 2000}})
	cp, _ := tr.TakeCheckpoint(100)
	if cp == nil || len(cp.Expiries) != 1 || cp.Expiries[0] != (Expiry{ID: 1, Expiry: 10000}) {
		t.Fatalf("first checkpoint after promotion %+v, want lease 1 with its whole TTL", cp)
	}
	// A keep-alive right after still renews it, through a reset.
	if r := tr.Renew(1); r.TTL != 10 || r.ResetSeq == 0 {
		t.Fatalf("renew after the promotion checkpoint: %+v", r)
	}
}

// TestFrequentLeaderChangesStillExpire moves leadership every 700 ms, more
// often than CheckpointAfter, while a lease's holder is gone from the start.
// Each new leader restarts a lease it finds uncheckpointed with its whole
// TTL, so unless that leader checkpoints it at once the lease never expires.
func TestFrequentLeaderChangesStillExpire(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	start := c.t
	table := NewTable()
	if err := table.Grant(1, 5); err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(c, TrackerConfig{CheckpointAfter: time.Second})
	tr.Promote(table.Clock(), nil)
	tr.Granted(1, 5)
	for changes := 0; c.t.Sub(start) < 20*time.Second; changes++ {
		for range 7 {
			c.advance(100 * time.Millisecond)
			if cp, _ := tr.TakeCheckpoint(100); cp != nil {
				table.Apply(cp)
			}
			if got := tr.Expired(10); len(got) > 0 {
				gone := c.t.Sub(start)
				if gone < 5*time.Second {
					t.Fatalf("expired after %v, before its 5 s TTL", gone)
				}
				// One whole TTL from the first new leader, at most
				// CheckpointAfter after the grant, plus a tick.
				if gone > 6100*time.Millisecond {
					t.Fatalf("expired after %v and %d leader changes, want at most TTL + CheckpointAfter + a tick", gone, changes)
				}
				return
			}
		}
		tr.Demote()
		tr = NewTracker(c, TrackerConfig{CheckpointAfter: time.Second})
		tr.Promote(table.Clock(), table.Leases())
	}
	t.Fatal("a lease whose holder stopped at its grant was still alive after 20 s of leader changes")
}

func TestPromoteDemote(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := NewTracker(c, TrackerConfig{})
	tr.Granted(1, 1)
	if tr.Len() != 0 || tr.Active() {
		t.Fatal("an inactive tracker must ignore grants")
	}
	tr.Promote(0, []Lease{{ID: 1, TTL: 1}, {ID: 2, TTL: 5, Expiry: 2000}})
	c.advance(2 * time.Second)
	if got := tr.Expired(10); !reflect.DeepEqual(got, []int64{1, 2}) {
		t.Fatalf("got %v", got)
	}
	tr.Demote()
	if r := tr.Renew(1); r.TTL != 0 || r.Due {
		t.Fatalf("a demoted tracker renewed a lease, or holds it due: %+v", r)
	}
	if cp, _ := tr.TakeCheckpoint(10); cp != nil {
		t.Fatal("a demoted tracker proposed a checkpoint")
	}
}

func TestTableGrantRevokeDuplicates(t *testing.T) {
	tb := NewTable()
	if err := tb.Grant(5, 10); err != nil {
		t.Fatal(err)
	}
	if err := tb.Grant(5, 20); !errors.Is(err, ErrLeaseExists) {
		t.Fatalf("duplicate grant: %v", err)
	}
	if err := tb.Revoke(6); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("revoke missing: %v", err)
	}
	tb.Apply(&Checkpoint{Clock: 50, Expiries: []Expiry{{ID: 5, Expiry: 900}, {ID: 99, Expiry: 1}}})
	tb.Apply(&Checkpoint{Clock: 20})
	if l, _ := tb.Lookup(5); l.Expiry != 900 || tb.Clock() != 50 {
		t.Fatalf("lease %+v clock %d", l, tb.Clock())
	}
	tb.Apply(&Checkpoint{Resets: []int64{5}})
	if l, _ := tb.Lookup(5); l.Expiry != 0 {
		t.Fatal("reset did not apply")
	}
	if err := tb.Revoke(5); err != nil || tb.Len() != 0 {
		t.Fatal(err)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	cp := &Checkpoint{Clock: 123456, Resets: []int64{1, 1 << 40}, Expiries: []Expiry{{ID: 7, Expiry: 99}, {ID: 1 << 62, Expiry: 1}}}
	b, err := cp.Marshal()
	if err != nil || len(b) != cp.Size() {
		t.Fatalf("marshal: %v, %d bytes vs size %d", err, len(b), cp.Size())
	}
	var got Checkpoint
	if err := got.Unmarshal(b); err != nil || !reflect.DeepEqual(&got, cp) {
		t.Fatalf("got %+v, %v", got, err)
	}
	ex := &Expire{IDs: []int64{3, 2, 1}}
	b, _ = ex.Marshal()
	var gx Expire
	if err := gx.Unmarshal(b); err != nil || !reflect.DeepEqual(gx.IDs, ex.IDs) {
		t.Fatalf("got %+v, %v", gx, err)
	}
	if err := gx.Unmarshal([]byte{0x0a, 0x05, 0x01}); err == nil {
		t.Fatal("truncated input must fail")
	}
}

func FuzzCheckpointDecode(f *testing.F) {
	b, _ := (&Checkpoint{Clock: 1, Resets: []int64{2}, Expiries: []Expiry{{3, 4}}}).Marshal()
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Checkpoint
		if err := c.Unmarshal(data); err != nil {
			return
		}
		out, _ := c.Marshal()
		var again Checkpoint
		if err := again.Unmarshal(out); err != nil || !reflect.DeepEqual(c, again) {
			t.Fatalf("re-encoding changed the message: %+v vs %+v (%v)", c, again, err)
		}
	})
}

func TestLargestTTLNeverWraps(t *testing.T) {
	tr, c := newTestTracker()
	c.advance(10 * 365 * 24 * time.Hour) // a decade of uptime
	tr.Granted(1, MaxTTL)
	if got := tr.Expired(10); len(got) != 0 {
		t.Fatalf("a lease of the largest TTL expired at once: %v", got)
	}
	if rem, ttl, ok := tr.Remaining(1); !ok || ttl != MaxTTL || rem < MaxTTL/2 {
		t.Fatalf("remaining %d ttl %d ok %v", rem, ttl, ok)
	}
}

// A keep-alive whose reset waits for the next checkpoint batch when the
// term ends was never replicated: Demote uses up that batch's number, so
// the next term's first batch cannot answer for it (it would tell the
// holder a full TTL while the lease restarts from its old checkpoint).
func TestDemoteUsesUpThePendingResetsBatch(t *testing.T) {
	tr, c := newTestTracker()
	tr.Granted(1, 10)
	c.advance(1500 * time.Millisecond)
	if cp, _ := tr.TakeCheckpoint(100); cp == nil {
		t.Fatal("no checkpoint")
	}
	r := tr.Renew(1)
	if r.ResetSeq == 0 {
		t.Fatalf("renew after checkpoint needs a reset: %+v", r)
	}
	if lost := tr.Demote(); lost != r.ResetSeq {
		t.Fatalf("Demote used up batch %d, want the pending reset's %d", lost, r.ResetSeq)
	}
	tr.Promote(0, nil)
	tr.Granted(2, 10)
	c.advance(1500 * time.Millisecond)
	cp, seq := tr.TakeCheckpoint(100)
	if cp == nil {
		t.Fatal("no checkpoint in the new term")
	}
	if seq <= r.ResetSeq {
		t.Fatalf("the new term's first batch is %d, which a reset of the old term (%d) would take for its own", seq, r.ResetSeq)
	}
	if len(cp.Resets) != 0 {
		t.Fatalf("the new term's batch carries the old term's resets: %+v", cp.Resets)
	}
}

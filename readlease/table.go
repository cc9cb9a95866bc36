package readlease

import (
	"bytes"
	"time"

	"github.com/google/btree"
)

// HolderID names one client session on the leader.
type HolderID uint64

// Write is what a command may change, as far as read leases are concerned.
type Write struct {
	// Keys are single keys the command may put or delete.
	Keys [][]byte
	// Ranges are [start, end) key ranges the command may delete; an end of
	// "\x00" means every key from start on (etcd's convention).
	Ranges [][2][]byte
	// Leases are leases the command revokes: every key attached to them is
	// deleted, including keys attached while the command waits, so grants on
	// keys attached to them stop too.
	Leases []int64
}

// Empty reports whether the write touches nothing a lease could cover.
func (w Write) Empty() bool { return len(w.Keys) == 0 && len(w.Ranges) == 0 && len(w.Leases) == 0 }

func (w Write) covers(key []byte) bool {
	for _, k := range w.Keys {
		if bytes.Equal(k, key) {
			return true
		}
	}
	for _, r := range w.Ranges {
		if inRange(key, r[0], r[1]) {
			return true
		}
	}
	return false
}

func inRange(key, start, end []byte) bool {
	if bytes.Compare(key, start) < 0 {
		return false
	}
	return len(end) == 1 && end[0] == 0 || bytes.Compare(key, end) < 0
}

// Limits bound the table's memory: a client that asks for many keys and
// never answers an invalidation cannot grow it without bound.
type Limits struct {
	// MaxKeys bounds the leases held at once, over all keys and holders.
	MaxKeys int
	// MaxHoldersPerKey bounds the holders of one key.
	MaxHoldersPerKey int
}

// Table is one leader term's record of the read leases it granted and the
// writes waiting for them. It is not safe for concurrent use: the caller
// holds one lock around every call, and reads the value it grants a lease
// on under that same lock (argument B).
type Table struct {
	duration time.Duration
	limits   Limits
	// notBefore is when every lease an earlier leader could have granted has
	// run out (argument C); writes wait for it.
	notBefore time.Time

	// leases is ordered by key, so a range write visits the keys in its
	// range only, not every lease.
	leases  *btree.BTreeG[*keyLeases]
	probe   keyLeases // the search key of lookup, kept to not allocate one
	count   int
	holders map[HolderID]*holder
	writes  map[*Pending]struct{}
	// pendingLeases counts the waiting or in-flight writes that revoke each
	// lease.
	pendingLeases map[int64]int
}

// keyLeases is the leases held on one key, by holder.
type keyLeases struct {
	key     string
	holders map[HolderID]*held
}

func keyLess(a, b *keyLeases) bool { return a.key < b.key }

type held struct {
	deadline time.Time
	// asked is the invalidation that asked the holder to drop it (0: none).
	asked   uint64
	waiters []*Pending
}

type holder struct {
	nextSeq uint64
	// asked maps an invalidation's seq to the keys it named.
	asked map[uint64][]string
	gone  bool
	// released: the holder ended its session saying it serves none of its
	// leases any more (Release), so they bind nobody.
	released bool
	count    int // leases held
}

// Pending is a write admitted by Begin, waiting or in flight.
type Pending struct {
	w           Write
	outstanding int
	// Until is when the write may go ahead whatever the holders say: the
	// last deadline of a lease it waits for, or the table's notBefore.
	Until time.Time
	// NotBefore is the earliest the write may go ahead even when every
	// holder has answered.
	NotBefore time.Time
	done      bool
}

// Ready reports whether every holder the write waits for has answered.
func (p *Pending) Ready() bool { return p.outstanding == 0 }

// Invalidation asks one holder to drop keys.
type Invalidation struct {
	Holder HolderID
	Seq    uint64
	Keys   [][]byte
}

// NewTable returns the table of a leader term that began at start, whose
// predecessors' leases may live until notBefore (start when no lease was
// ever granted).
func NewTable(duration time.Duration, limits Limits, notBefore time.Time) *Table {
	return &Table{
		duration:      duration,
		limits:        limits,
		notBefore:     notBefore,
		leases:        btree.NewG(32, keyLess),
		holders:       map[HolderID]*holder{},
		writes:        map[*Pending]struct{}{},
		pendingLeases: map[int64]int{},
	}
}

// lookup returns key's leases, or nil when nobody holds one.
func (t *Table) lookup(key string) *keyLeases {
	t.probe.key = key
	kl, _ := t.leases.Get(&t.probe)
	t.probe.key = ""
	return kl
}

// holding returns the lease h holds on key, or nil.
func (t *Table) holding(key string, h HolderID) *held {
	if kl := t.lookup(key); kl != nil {
		return kl.holders[h]
	}
	return nil
}

// Duration is the lease this table grants.
func (t *Table) Duration() time.Duration { return t.duration }

// NotBefore is when a write may first go ahead in this term.
func (t *Table) NotBefore() time.Time { return t.notBefore }

// Len is the number of leases held (some may have run out and not yet been
// swept).
func (t *Table) Len() int { return t.count }

// AddHolder registers a session; it must be new.
func (t *Table) AddHolder(h HolderID) {
	t.holders[h] = &holder{asked: map[uint64][]string{}}
}

// RemoveHolder records that a session ended. Its leases stay until their
// deadlines: the client may serve them still, and can no longer be asked to
// drop them, so writes on those keys wait them out.
func (t *Table) RemoveHolder(h HolderID) {
	if s := t.holders[h]; s != nil {
		s.gone = true
	}
}

// Release records that holder h ended its session after dropping every
// lease it held: a write waits for none of them any more. It returns the
// writes that became Ready. Leases nobody asked for yet stay in the table,
// and bind nobody, until a write or the sweep meets them: finding them all
// now would cost a per-holder index of keys on every lease.
func (t *Table) Release(h HolderID) []*Pending {
	s := t.holders[h]
	if s == nil {
		return nil
	}
	s.gone, s.released = true, true
	var ready []*Pending
	for seq := range s.asked {
		ready = append(ready, t.Ack(h, seq)...)
	}
	return ready
}

// Grant records a lease on key for holder h and returns its duration, or 0
// when the key must be read without one: a write on it is waiting or in
// flight (argument B), the key is attached to a lease being revoked, the
// holder is unknown or gone, or a limit is reached. kvLease is the lease
// the key's current value is attached to (0: none).
func (t *Table) Grant(h HolderID, key []byte, kvLease int64, now time.Time) time.Duration {
	s := t.holders[h]
	if s == nil || s.gone || t.duration <= 0 {
		return 0
	}
	if kvLease != 0 && t.pendingLeases[kvLease] > 0 {
		return 0
	}
	for p := range t.writes {
		if p.w.covers(key) {
			return 0
		}
	}
	kl := t.lookup(string(key))
	if kl != nil {
		if e := kl.holders[h]; e != nil && !e.deadline.After(now) {
			// Ran out: whatever it was asked, it binds nobody any more.
			// drop may delete the key's entry, so it is looked up again.
			t.drop(kl.key, h)
			kl = t.lookup(string(key))
		}
	}
	var hs map[HolderID]*held
	if kl != nil {
		hs = kl.holders
	}
	if e := hs[h]; e != nil {
		if e.asked != 0 {
			// Asked to drop it and not answered yet: the answer would drop
			// the renewed lease too.
			return 0
		}
		e.deadline = now.Add(t.duration)
		return t.duration
	}
	if t.count >= t.limits.MaxKeys || len(hs) >= t.limits.MaxHoldersPerKey {
		return 0
	}
	if kl == nil {
		kl = &keyLeases{key: string(key), holders: map[HolderID]*held{}}
		t.leases.ReplaceOrInsert(kl)
	}
	kl.holders[h] = &held{deadline: now.Add(t.duration)}
	t.count++
	s.count++
	return t.duration
}

// Begin admits a write: from now until End, no lease is granted on what it
// touches. It returns the invalidations to send (to holders still
// connected) and the pending write, which is Ready once every live lease it
// touches was dropped, and may go ahead at once when Ready and NotBefore
// has passed, or at Until whatever the holders say.
func (t *Table) Begin(w Write, leaseKeys func(int64) [][]byte, now time.Time) (*Pending, []Invalidation) {
	p := &Pending{w: w, NotBefore: t.notBefore, Until: t.notBefore}
	t.writes[p] = struct{}{}
	for _, id := range w.Leases {
		t.pendingLeases[id]++
		for _, k := range leaseKeys(id) {
			p.w.Keys = append(p.w.Keys, k)
		}
	}
	byHolder := map[HolderID][]string{}
	// A key named twice (alone and in a range, in two ranges, or alone and
	// through a revoked lease) is visited once: p already waits for it. A
	// write of one key, the common case, needs no record.
	var seen map[*keyLeases]bool
	if len(p.w.Keys)+len(p.w.Ranges) > 1 {
		seen = map[*keyLeases]bool{}
	}
	visit := func(kl *keyLeases) {
		if seen != nil {
			if seen[kl] {
				return
			}
			seen[kl] = true
		}
		key := kl.key
		for h, e := range kl.holders {
			if !e.deadline.After(now) || t.holders[h].released {
				t.drop(key, h)
				continue
			}
			e.waiters = append(e.waiters, p)
			p.outstanding++
			if e.deadline.After(p.Until) {
				p.Until = e.deadline
			}
			if e.asked == 0 && !t.holders[h].gone {
				byHolder[h] = append(byHolder[h], key)
			}
		}
	}
	for _, k := range p.w.Keys {
		if kl := t.lookup(string(k)); kl != nil {
			visit(kl)
		}
	}
	if len(p.w.Ranges) > 0 {
		t.visitRanges(p.w, visit)
	}
	var out []Invalidation
	for h, keys := range byHolder {
		s := t.holders[h]
		s.nextSeq++
		seq := s.nextSeq
		s.asked[seq] = keys
		inv := Invalidation{Holder: h, Seq: seq}
		for _, k := range keys {
			t.holding(k, h).asked = seq
			inv.Keys = append(inv.Keys, []byte(k))
		}
		out = append(out, inv)
	}
	return p, out
}

// visitRanges calls visit with the leases of every key in w's ranges. It
// collects them first: visit may drop one, and the tree must not change
// under its iterator.
func (t *Table) visitRanges(w Write, visit func(*keyLeases)) {
	var in []*keyLeases
	collect := func(kl *keyLeases) bool {
		in = append(in, kl)
		return true
	}
	for _, r := range w.Ranges {
		from := &keyLeases{key: string(r[0])}
		switch {
		case len(r[1]) == 1 && r[1][0] == 0:
			t.leases.AscendGreaterOrEqual(from, collect)
		case bytes.Compare(r[0], r[1]) < 0:
			t.leases.AscendRange(from, &keyLeases{key: string(r[1])}, collect)
		}
	}
	for _, kl := range in {
		visit(kl)
	}
}

// Writing returns the writes admitted by Begin and not yet ended that name
// key, alone or in a range.
func (t *Table) Writing(key []byte) []*Pending {
	var out []*Pending
	for p := range t.writes {
		if p.w.covers(key) {
			out = append(out, p)
		}
	}
	return out
}

// Ack records that holder h dropped the keys of invalidation seq, and
// returns the writes that became Ready.
func (t *Table) Ack(h HolderID, seq uint64) []*Pending {
	s := t.holders[h]
	if s == nil {
		return nil
	}
	keys, ok := s.asked[seq]
	if !ok {
		return nil
	}
	delete(s.asked, seq)
	var ready []*Pending
	for _, k := range keys {
		e := t.holding(k, h)
		if e == nil || e.asked != seq {
			continue
		}
		for _, p := range e.waiters {
			p.outstanding--
			if p.outstanding == 0 && !p.done {
				ready = append(ready, p)
			}
		}
		e.waiters = nil
		t.drop(k, h)
	}
	return ready
}

// End releases a write admitted by Begin: it applied on this member, or
// will never be applied by this leader. Grants on its keys resume.
func (t *Table) End(p *Pending) {
	if p.done {
		return
	}
	p.done = true
	delete(t.writes, p)
	for _, id := range p.w.Leases {
		if t.pendingLeases[id]--; t.pendingLeases[id] <= 0 {
			delete(t.pendingLeases, id)
		}
	}
}

// Sweep forgets leases that ran out by now, and holders that are gone and
// hold nothing; it returns how many leases it forgot.
func (t *Table) Sweep(now time.Time) int {
	type lease struct {
		key string
		h   HolderID
	}
	var expired []lease
	t.leases.Ascend(func(kl *keyLeases) bool {
		for h, e := range kl.holders {
			if !e.deadline.After(now) {
				expired = append(expired, lease{kl.key, h})
			}
		}
		return true
	})
	for _, l := range expired {
		t.drop(l.key, l.h)
	}
	n := len(expired)
	for h, s := range t.holders {
		if s.gone && s.count == 0 {
			delete(t.holders, h)
		}
	}
	return n
}

// drop forgets one lease. A write still waiting on it is not released: its
// Until has passed or will (the lease was live when the write began), so it
// goes ahead then.
func (t *Table) drop(key string, h HolderID) {
	kl := t.lookup(key)
	if kl == nil || kl.holders[h] == nil {
		return
	}
	delete(kl.holders, h)
	t.count--
	t.holders[h].count--
	if len(kl.holders) == 0 {
		t.leases.Delete(kl)
	}
}

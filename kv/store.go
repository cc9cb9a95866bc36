package kv

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Options configures a Store.
type Options struct {
	// LeaseExists reports whether a lease is granted. Put and Txn put ops with a nonzero lease
	// fail with ErrLeaseNotFound when it returns false. nil means no lease exists.
	// Called with the store's write lock held; must not call back into the Store.
	LeaseExists func(id int64) bool
}

// record is one change of one key. Records are never modified after they
// are appended: snapshots and watch events read them without the lock.
type record struct {
	// kv of a tombstone carries only Key and ModRevision, which is exactly
	// what etcd puts in a DELETE event.
	kv   mvccpb.KeyValue
	sub  int64
	tomb bool
}

// recordOverhead approximates what the store spends on one record beyond
// its key and value bytes: the record itself, its places in the log and in
// its key's history, and the key index's share.
const recordOverhead = 128

// cost is what the record counts towards the store's Size.
func (r *record) cost() int64 {
	return int64(len(r.kv.Key) + len(r.kv.Value) + recordOverhead)
}

// before orders records the way the log is sorted: by main revision, then by
// position within that revision.
func (r *record) before(o *record) bool {
	if r.kv.ModRevision != o.kv.ModRevision {
		return r.kv.ModRevision < o.kv.ModRevision
	}
	return r.sub < o.sub
}

// copyKV hands out a private copy so callers (and the gRPC marshaller) never
// share a struct with the store; the byte slices stay shared and read-only.
func (r *record) copyKV() *mvccpb.KeyValue {
	kv := r.kv
	return &kv
}

// keyEntry is the key index item: all retained records of one key, in
// ascending (revision, sub) order.
type keyEntry struct {
	key  []byte
	recs []*record
}

// latest returns the live version of the key including changes already made
// by the write in progress, or nil if the key is deleted.
func (e *keyEntry) latest() *record {
	if n := len(e.recs); n > 0 {
		if r := e.recs[n-1]; !r.tomb {
			return r
		}
	}
	return nil
}

// at returns the version of the key visible at revision rev, or nil.
func (e *keyEntry) at(rev int64) *record {
	recs := e.recs
	n := len(recs)
	if n == 0 {
		return nil
	}
	var r *record
	if last := recs[n-1]; last.kv.ModRevision <= rev {
		r = last
	} else {
		i := countUpTo(recs, rev)
		if i == 0 {
			return nil
		}
		r = recs[i-1]
	}
	if r.tomb {
		return nil
	}
	return r
}

// countUpTo returns how many records of recs have a main revision <= rev.
func countUpTo(recs []*record, rev int64) int {
	lo, hi := 0, len(recs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if recs[m].kv.ModRevision <= rev {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// indexOf finds r among the records of its key.
func (e *keyEntry) indexOf(r *record) int {
	// The live watch path asks about the newest record, so look there first.
	if n := len(e.recs); n > 0 && e.recs[n-1] == r {
		return n - 1
	}
	lo, hi := 0, len(e.recs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if e.recs[m].before(r) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(e.recs) && e.recs[lo] == r {
		return lo
	}
	return -1
}

func entryLess(a, b *keyEntry) bool { return bytes.Compare(a.key, b.key) < 0 }

// Store is the MVCC key-value store and watch hub. See the package doc for the
// concurrency contract.
type Store struct {
	mu sync.RWMutex

	leaseExists func(int64) bool

	rev        int64
	compactRev int64
	// compactionHashes are the hashes the last compactions answer HashKV
	// with at their revisions (keepCompactionHash).
	compactionHashes []KVHash

	// log is the source of truth. It is only ever appended to or replaced by
	// a new slice (Compact, Restore), never rewritten in place, so a Snapshot
	// can keep a prefix of it without copying.
	log []*record
	// tree is the key index: every key with a retained record, in order.
	// Point lookups go through it too: a hash map beside it made them
	// about 400 ns faster but cost about 50 bytes per key, more than a
	// tenth of a member's memory at a million keys (docs/BENCHMARKS.md,
	// "A million keys").
	tree *btree.BTreeG[*keyEntry]
	// leases maps a lease ID to the entries whose live version carries it.
	leases map[int64]leaseKeys
	live   int
	// size is the sum of the cost of every record in log. It changes
	// under the write lock and is read without one: every proposal's quota
	// check reads it.
	size atomic.Int64

	watch hub
}

// NewStore returns an empty store at revision 1.
func NewStore(opts Options) *Store {
	s := &Store{leaseExists: opts.LeaseExists}
	s.reset(1, 0, nil)
	s.watch.init()
	return s
}

// reset installs a new log and rebuilds every derived index from it.
func (s *Store) reset(rev, compactRev int64, log []*record) {
	s.rev, s.compactRev, s.compactionHashes = rev, compactRev, nil
	s.log = log
	s.tree = btree.NewG(32, entryLess)
	s.leases = make(map[int64]leaseKeys)
	s.live = 0
	s.size.Store(0)
	for _, r := range log {
		s.size.Add(r.cost())
		e := s.lookup(r.kv.Key)
		if e == nil {
			e = &keyEntry{key: r.kv.Key}
			s.tree.ReplaceOrInsert(e)
		} else {
			// One copy of each key for all its records, as live writes
			// keep; the records are not shared with anyone yet.
			r.kv.Key = e.key
		}
		e.recs = append(e.recs, r)
	}
	s.tree.Ascend(func(e *keyEntry) bool {
		if r := e.latest(); r != nil {
			s.live++
			s.attach(e, r.kv.Lease)
		}
		return true
	})
}

// lookup returns the index entry of key, or nil.
func (s *Store) lookup(key []byte) *keyEntry {
	e, _ := s.tree.Get(&keyEntry{key: key})
	return e
}

// entry returns the index entry of key, creating it if needed.
func (s *Store) entry(key []byte) *keyEntry {
	if e := s.lookup(key); e != nil {
		return e
	}
	e := &keyEntry{key: bytes.Clone(key)}
	s.tree.ReplaceOrInsert(e)
	return e
}

func (s *Store) dropEntry(e *keyEntry) {
	s.tree.Delete(e)
}

func (s *Store) attach(e *keyEntry, lease int64) {
	if lease == 0 {
		return
	}
	set := s.leases[lease]
	set.add(e)
	s.leases[lease] = set
}

func (s *Store) detach(e *keyEntry, lease int64) {
	if lease == 0 {
		return
	}
	set, ok := s.leases[lease]
	if !ok {
		return
	}
	set.remove(e)
	if set.len() == 0 {
		delete(s.leases, lease)
	} else {
		s.leases[lease] = set
	}
}

// leaseKeys is the set of entries attached to one lease. Most leases carry
// exactly one key (a service registration, a lock, an election), so that
// one is held inline, without an allocation; a million leases make the
// difference visible. Further keys go to a slice, and past leaseKeysFew to a
// map, which keeps removal cheap for a session lease with thousands of keys.
type leaseKeys struct {
	one  *keyEntry
	more *leaseKeysMore
}

type leaseKeysMore struct {
	few  []*keyEntry
	many map[*keyEntry]struct{}
}

const leaseKeysFew = 8

func (l *leaseKeys) add(e *keyEntry) {
	if l.one == nil || l.one == e {
		l.one = e
		return
	}
	if l.more == nil {
		l.more = &leaseKeysMore{}
	}
	m := l.more
	switch {
	case m.many != nil:
		m.many[e] = struct{}{}
	case slices.Contains(m.few, e):
	case len(m.few) < leaseKeysFew:
		m.few = append(m.few, e)
	default:
		m.many = make(map[*keyEntry]struct{}, 2*leaseKeysFew)
		for _, x := range m.few {
			m.many[x] = struct{}{}
		}
		m.many[e] = struct{}{}
		m.few = nil
	}
}

func (l *leaseKeys) remove(e *keyEntry) {
	if l.one == e {
		l.one = nil
		// Keep one inline: promote any other key.
		if m := l.more; m != nil {
			if n := len(m.few); n > 0 {
				l.one = m.few[n-1]
				m.few[n-1] = nil
				m.few = m.few[:n-1]
			} else {
				for x := range m.many {
					l.one = x
					delete(m.many, x)
					break
				}
			}
		}
	} else if m := l.more; m != nil {
		if m.many != nil {
			delete(m.many, e)
		} else if i := slices.Index(m.few, e); i >= 0 {
			m.few = slices.Delete(m.few, i, i+1)
		}
	}
	if m := l.more; m != nil && len(m.few) == 0 && len(m.many) == 0 {
		l.more = nil
	}
}

func (l *leaseKeys) len() int {
	n := 0
	if l.one != nil {
		n = 1
	}
	if m := l.more; m != nil {
		n += len(m.few) + len(m.many)
	}
	return n
}

func (l *leaseKeys) each(f func(*keyEntry)) {
	if l.one != nil {
		f(l.one)
	}
	if m := l.more; m != nil {
		for _, e := range m.few {
			f(e)
		}
		for e := range m.many {
			f(e)
		}
	}
}

// span is a key range in the request conventions of etcd: no range end means
// one key, a range end of "\x00" means no upper bound.
type span struct {
	key, end []byte
	single   bool
}

func mkSpan(key, rangeEnd []byte) span {
	switch {
	case len(rangeEnd) == 0:
		return span{key: key, single: true}
	case len(rangeEnd) == 1 && rangeEnd[0] == 0:
		return span{key: key}
	default:
		return span{key: key, end: rangeEnd}
	}
}

func (sp span) contains(k []byte) bool {
	if sp.single {
		return bytes.Equal(k, sp.key)
	}
	return bytes.Compare(k, sp.key) >= 0 && (sp.end == nil || bytes.Compare(k, sp.end) < 0)
}

// scan visits the index entries in sp in ascending key order until fn
// returns false. fn may append records to the entries it visits but must not
// add or remove entries.
func (s *Store) scan(sp span, fn func(*keyEntry) bool) {
	if sp.single {
		if e := s.lookup(sp.key); e != nil {
			fn(e)
		}
		return
	}
	from := &keyEntry{key: sp.key}
	if sp.end == nil {
		s.tree.AscendGreaterOrEqual(from, fn)
		return
	}
	if bytes.Compare(sp.key, sp.end) >= 0 {
		return
	}
	s.tree.AscendRange(from, &keyEntry{key: sp.end}, fn)
}

// Rev returns the current revision.
func (s *Store) Rev() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rev
}

// CompactRev returns the revision of the last compaction, 0 if none.
func (s *Store) CompactRev() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.compactRev
}

// Size is the bytes the store's state counts for its quota: the keys and
// values of every revision it keeps, plus a fixed overhead per revision for
// the store's own structures. It shrinks when a compaction drops history.
func (s *Store) Size() int64 { return s.size.Load() }

// KeyCount returns the number of live (non-deleted) keys at the current revision.
func (s *Store) KeyCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.live
}

// LeaseKeys returns the keys attached to lease id, sorted by key bytes. The
// returned slices are the caller's own.
func (s *Store) LeaseKeys(id int64) [][]byte {
	s.mu.RLock()
	set := s.leases[id]
	if set.len() == 0 {
		s.mu.RUnlock()
		return nil
	}
	size := 0
	set.each(func(e *keyEntry) { size += len(e.key) })
	buf := make([]byte, 0, size)
	keys := make([][]byte, 0, set.len())
	set.each(func(e *keyEntry) {
		start := len(buf)
		buf = append(buf, e.key...)
		keys = append(keys, buf[start:len(buf):len(buf)])
	})
	s.mu.RUnlock()
	// A big set is a map; sorting removes any dependence on its order.
	slices.SortFunc(keys, bytes.Compare)
	return keys
}

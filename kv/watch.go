package kv

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ErrEmptyWatcherRange is etcd's refusal of a watch whose range end is not
// after its key: such a watcher could never see an event.
var ErrEmptyWatcherRange = errors.New("mvcc: watcher range is empty")

// ValidateWatch checks a watch request as etcd does before it creates the
// watcher: the range must not be empty, and a negative start revision is
// refused as compacted (etcd's answer). An empty key means the smallest key,
// "\x00"; a range end of "\x00" means every key from the key on.
func ValidateWatch(key, rangeEnd []byte, startRev int64) error {
	if len(key) == 0 {
		key = []byte{0}
	}
	if sp := mkSpan(key, rangeEnd); !sp.single && sp.end != nil && bytes.Compare(sp.key, sp.end) >= 0 {
		return ErrEmptyWatcherRange
	}
	if startRev < 0 {
		return ErrCompacted
	}
	return nil
}

// WatchID identifies a watcher; it is assigned by the caller, unique per sink.
type WatchID int64

// Sink receives events for the watchers registered on it. Deliver is called with the store's
// write lock held, from the goroutine applying writes: it must not block and must not call into
// the Store. It returns false if it cannot take the events now (its buffer is full): the watcher
// then becomes "unsynced" — the hub stops delivering to it and remembers the next revision it
// needs; the sink owner later calls Store.Resync to catch it up from history.
//
// A Sink is used as a map key, so its dynamic type must be comparable (a
// pointer, typically). The events handed to Deliver, and their KeyValues, may
// be shared with other watchers and must be treated as read-only.
type Sink interface {
	Deliver(id WatchID, rev int64, events []*mvccpb.Event) bool
}

// CanceledSink is an optional extension of Sink. Restore calls Canceled, with
// the store's write lock held, for each watcher of the sink that it had to
// remove because the restored history cannot continue it; compactRev is the
// restored compaction revision, the compact_revision to report to the client.
// Like Deliver, Canceled must not block nor call into the Store. Sinks that do
// not implement it find such watchers unsynced, with Resync reporting
// ErrGRPCCompacted; nothing prompts them to call Resync, so implement it.
type CanceledSink interface {
	Sink
	Canceled(id WatchID, compactRev int64)
}

// WatchRequest describes a watcher. Key and RangeEnd follow Range's
// conventions; an empty Key means "\x00", as in etcd.
type WatchRequest struct {
	ID       WatchID
	Key      []byte
	RangeEnd []byte
	StartRev int64 // 0 = from current rev + 1
	PrevKV   bool
	NoPut    bool
	NoDelete bool
	Sink     Sink
}

// ErrWatchNotFound is returned by Resync for a watcher that is not
// registered (never was, canceled, or removed for compaction).
var ErrWatchNotFound = errors.New("kv: watcher not registered")

type watcher struct {
	sink     Sink
	id       WatchID
	sp       span
	prevKV   bool
	noPut    bool
	noDelete bool
	minRev   int64 // first revision it wants
	synced   bool
	next     int64  // when unsynced: the next revision it needs
	seq      uint64 // registration order, for deterministic iteration

	// Scratch for notify: which events of the revision matched.
	first, last, n int
}

func (w *watcher) wants(r *record) bool {
	if r.tomb {
		if w.noDelete {
			return false
		}
	} else if w.noPut {
		return false
	}
	return w.sp.contains(r.kv.Key)
}

// hub is the watcher registry. Single-key watchers are found by a map lookup
// per changed key; range watchers are checked one by one on every change,
// which is fine for the few range watchers a coordination service sees but
// would want an interval tree if that changes.
type hub struct {
	sinks   map[Sink]map[WatchID]*watcher
	singles map[string][]*watcher
	ranges  []*watcher
	count   int
	seq     uint64
	touched []*watcher
}

func (h *hub) init() {
	h.sinks = make(map[Sink]map[WatchID]*watcher)
	h.singles = make(map[string][]*watcher)
}

func (h *hub) add(w *watcher) {
	h.seq++
	w.seq = h.seq
	ws := h.sinks[w.sink]
	if ws == nil {
		ws = make(map[WatchID]*watcher)
		h.sinks[w.sink] = ws
	}
	ws[w.id] = w
	if w.sp.single {
		h.singles[string(w.sp.key)] = append(h.singles[string(w.sp.key)], w)
	} else {
		h.ranges = append(h.ranges, w)
	}
	h.count++
}

func (h *hub) remove(w *watcher) {
	ws := h.sinks[w.sink]
	delete(ws, w.id)
	if len(ws) == 0 {
		delete(h.sinks, w.sink)
	}
	if w.sp.single {
		k := string(w.sp.key)
		list := slices.DeleteFunc(h.singles[k], func(x *watcher) bool { return x == w })
		if len(list) == 0 {
			delete(h.singles, k)
		} else {
			h.singles[k] = list
		}
	} else {
		h.ranges = slices.DeleteFunc(h.ranges, func(x *watcher) bool { return x == w })
	}
	h.count--
}

// WatcherCount is how many watchers are registered, over every sink.
func (s *Store) WatcherCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.watch.count
}

func (h *hub) get(sink Sink, id WatchID) *watcher {
	return h.sinks[sink][id]
}

// Watch registers a watcher and, atomically with respect to writes, delivers to the sink every
// historical event with revision >= StartRev (grouped per revision, in order), so that live events
// follow with no gap and no repeat. If StartRev > 0 and StartRev <= CompactRev() it returns
// ErrCompacted and registers nothing (the caller reports compact_revision = CompactRev()).
// If the sink refuses during catch-up, the watcher is registered unsynced from the refused revision.
//
// StartRev == CompactRev() is refused although etcd accepts it: the
// tombstones at the compaction revision are gone, so its events are incomplete.
// A StartRev beyond the current revision is accepted and waits for it.
func (s *Store) Watch(req WatchRequest) error {
	if req.Sink == nil {
		return fmt.Errorf("kv: watch %d: nil sink", req.ID)
	}
	if err := ValidateWatch(req.Key, req.RangeEnd, req.StartRev); err != nil {
		return err
	}
	key := req.Key
	if len(key) == 0 {
		key = []byte{0}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch.get(req.Sink, req.ID) != nil {
		return fmt.Errorf("kv: watch %d: id already registered on this sink", req.ID)
	}
	if req.StartRev > 0 && req.StartRev <= s.compactRev {
		return ErrCompacted
	}
	sp := mkSpan(append([]byte(nil), key...), append([]byte(nil), req.RangeEnd...))
	w := &watcher{
		sink: req.Sink, id: req.ID, sp: sp,
		prevKV: req.PrevKV, noPut: req.NoPut, noDelete: req.NoDelete,
		minRev: req.StartRev,
	}
	if w.minRev <= 0 {
		w.minRev = s.rev + 1
	}
	s.watch.add(w)
	s.catchUp(w, w.minRev)
	return nil
}

// CancelWatch removes a watcher; unknown ids are ignored.
func (s *Store) CancelWatch(sink Sink, id WatchID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.watch.get(sink, id); w != nil {
		s.watch.remove(w)
	}
}

// Resync catches an unsynced watcher up from history (same contract as in Watch); returns
// ErrGRPCCompacted (and removes the watcher) if the history it needs was compacted away. No-op for a synced watcher.
func (s *Store) Resync(sink Sink, id WatchID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watch.get(sink, id)
	if w == nil {
		return ErrWatchNotFound
	}
	if w.synced {
		return nil
	}
	if w.next <= s.compactRev {
		s.watch.remove(w)
		return ErrCompacted
	}
	s.catchUp(w, w.next)
	return nil
}

// Progress delivers, for each synced watcher of the sink, an empty Deliver(id, s.Rev(), nil) under
// the lock, so a progress notification never overtakes events. Unsynced watchers are skipped.
// A watcher that refuses the notice becomes unsynced from the next revision.
func (s *Store) Progress(sink Sink) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.watch.sinks[sink]
	if len(ws) == 0 {
		return
	}
	list := make([]*watcher, 0, len(ws))
	for _, w := range ws {
		list = append(list, w)
	}
	slices.SortFunc(list, func(a, b *watcher) int { return cmp.Compare(a.id, b.id) })
	for _, w := range list {
		if w.synced && !w.sink.Deliver(w.id, s.rev, nil) {
			w.synced = false
			w.next = s.rev + 1
		}
	}
}

// catchUp delivers the history from revision from onward, one Deliver per
// revision that has matching events, and leaves w synced, or unsynced at the
// first revision the sink refused. The caller has checked from > compactRev,
// above which the history is complete.
func (s *Store) catchUp(w *watcher, from int64) {
	// A single-key watcher only needs its key's records, not the whole log.
	hist := s.log
	if w.sp.single {
		hist = nil
		if e := s.lookup(w.sp.key); e != nil {
			hist = e.recs
		}
	}
	i := countUpTo(hist, from-1)
	for i < len(hist) {
		rev := hist[i].kv.ModRevision
		var evs []*mvccpb.Event
		for ; i < len(hist) && hist[i].kv.ModRevision == rev; i++ {
			if r := hist[i]; w.wants(r) {
				ev := s.event(r)
				if w.prevKV {
					ev = s.withPrev(ev, r)
				}
				evs = append(evs, ev)
			}
		}
		if len(evs) > 0 && !w.sink.Deliver(w.id, rev, evs) {
			w.synced = false
			w.next = rev
			return
		}
	}
	w.synced = true
	w.next = 0
}

// event builds the event for a record; the Event and its KeyValue share one
// allocation.
func (s *Store) event(r *record) *mvccpb.Event {
	b := &struct {
		ev mvccpb.Event
		kv mvccpb.KeyValue
	}{kv: r.kv}
	b.ev.Kv = &b.kv
	if r.tomb {
		b.ev.Type = mvccpb.DELETE
	}
	return &b.ev
}

// withPrev returns a copy of ev carrying the version of the key before r, if
// history still has it.
func (s *Store) withPrev(ev *mvccpb.Event, r *record) *mvccpb.Event {
	out := &mvccpb.Event{Type: ev.Type, Kv: ev.Kv}
	e := s.lookup(r.kv.Key)
	if e == nil {
		return out
	}
	if i := e.indexOf(r); i > 0 {
		if p := e.recs[i-1]; !p.tomb {
			out.PrevKv = p.copyKV()
		}
	}
	return out
}

// notify hands the changes of revision rev to the synced watchers they
// match. Events are built once and shared; a watcher whose matches are
// consecutive gets a sub-slice, so a fan-out to many watchers of one key
// allocates nothing per watcher.
func (s *Store) notify(rev int64, recs []*record) {
	h := &s.watch
	if h.count == 0 {
		return
	}
	touched := h.touched[:0]
	mark := func(w *watcher, i int, r *record) {
		if !w.synced || rev < w.minRev || !w.wants(r) {
			return
		}
		if w.n == 0 {
			touched = append(touched, w)
			w.first = i
		}
		w.last = i
		w.n++
	}
	for i, r := range recs {
		if len(h.singles) > 0 {
			for _, w := range h.singles[string(r.kv.Key)] {
				mark(w, i, r)
			}
		}
		for _, w := range h.ranges {
			mark(w, i, r)
		}
	}
	if len(touched) == 0 {
		h.touched = touched
		return
	}

	evs := make([]*mvccpb.Event, len(recs))
	var prevEvs []*mvccpb.Event
	for _, w := range touched {
		base := evs
		if w.prevKV {
			if prevEvs == nil {
				prevEvs = make([]*mvccpb.Event, len(recs))
			}
			base = prevEvs
		}
		var out []*mvccpb.Event
		contiguous := w.last-w.first+1 == w.n
		if !contiguous {
			out = make([]*mvccpb.Event, 0, w.n)
		}
		for j := w.first; j <= w.last; j++ {
			r := recs[j]
			if !contiguous && !w.wants(r) {
				continue
			}
			if evs[j] == nil {
				evs[j] = s.event(r)
			}
			if w.prevKV && prevEvs[j] == nil {
				prevEvs[j] = s.withPrev(evs[j], r)
			}
			if !contiguous {
				out = append(out, base[j])
			}
		}
		if contiguous {
			out = base[w.first : w.last+1 : w.last+1]
		}
		w.n = 0
		if !w.sink.Deliver(w.id, rev, out) {
			w.synced = false
			w.next = rev
		}
	}
	clear(touched) // do not pin canceled watchers
	h.touched = touched[:0]
}

// resumeWatchers continues every watcher on a freshly restored state; see
// Restore. oldRev is the revision before the restore, which synced watchers
// have fully seen.
func (s *Store) resumeWatchers(oldRev int64) {
	h := &s.watch
	if h.count == 0 {
		return
	}
	all := make([]*watcher, 0, h.count)
	for _, ws := range h.sinks {
		for _, w := range ws {
			all = append(all, w)
		}
	}
	// Registration order, not map order, decides who is served first.
	slices.SortFunc(all, func(a, b *watcher) int { return cmp.Compare(a.seq, b.seq) })
	for _, w := range all {
		next := w.next
		if w.synced {
			next = max(oldRev+1, w.minRev)
		}
		// A watcher that saw revisions the restored state has not reached
		// would get different events for them; treat it like a compacted one.
		if next <= s.compactRev || next > s.rev+1 && next > w.minRev {
			if cs, ok := w.sink.(CanceledSink); ok {
				h.remove(w)
				cs.Canceled(w.id, s.compactRev)
				continue
			}
			// Without a way to tell the sink now, leave the watcher unsynced
			// at a compacted revision, so that its next Resync reports it.
			w.synced = false
			w.next = s.compactRev
			continue
		}
		s.catchUp(w, next)
	}
}

package logstore

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// flakyStable is a stable store whose writes fail while full is set.
type flakyStable struct {
	mu     sync.Mutex
	full   bool
	writes int // attempted term writes
	term   uint64
	tried  chan struct{}
}

var errDiskFull = errors.New("no space left on device")

func newFlakyStable() *flakyStable { return &flakyStable{tried: make(chan struct{}, 100)} }

func (f *flakyStable) setFull(full bool) {
	f.mu.Lock()
	f.full = full
	f.mu.Unlock()
}

func (f *flakyStable) Set([]byte, []byte) error { return f.SetUint64(nil, 0) }

func (f *flakyStable) Get([]byte) ([]byte, error) { return nil, errors.New("not found") }

func (f *flakyStable) SetUint64(key []byte, v uint64) error {
	f.mu.Lock()
	defer func() { f.tried <- struct{}{} }()
	defer f.mu.Unlock()
	f.writes++
	if f.full {
		return errDiskFull
	}
	if string(key) == string(keyCurrentTerm) {
		f.term = v
	}
	return nil
}

func (f *flakyStable) GetUint64([]byte) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.term, nil
}

func (f *flakyStable) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

func newStable(f *flakyStable, stop chan struct{}, candidate bool) (*Stable, *Health) {
	h := NewHealth(quiet)
	g := h.Stable(f, stop)
	g.Running()
	g.Campaigning(func() bool { return candidate })
	return g, h
}

// setTerm runs g.SetUint64(CurrentTerm, term) in a goroutine; the result
// arrives on the first channel if it returned, and the second closes when
// the goroutine ended, returned or not.
func setTerm(g *Stable, term uint64) (<-chan error, <-chan struct{}) {
	res, ended := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(ended)
		res <- g.SetUint64(keyCurrentTerm, term)
	}()
	return res, ended
}

// TestTermWriteWaitsForTheDisk: raft panics when it cannot persist a term,
// so a failed term write marks the member unable to persist and waits
// until the disk takes writes, then stores the term and returns nil.
func TestTermWriteWaitsForTheDisk(t *testing.T) {
	f := newFlakyStable()
	f.setFull(true)
	g, s := newStable(f, make(chan struct{}), false)
	// The store signals its attempt before Stable records the
	// failure, so the test waits for the state to change instead.
	failed := s.Changed()
	res, _ := setTerm(g, 5)
	<-failed
	if !errors.Is(s.Err(), ErrCannotPersist) {
		t.Fatalf("after a failed term write: storage error %v, want ErrCannotPersist", s.Err())
	}
	select {
	case err := <-res:
		t.Fatalf("a term write on a full disk returned %v; raft would panic on an error and act on a term it never stored on nil", err)
	default:
	}
	f.setFull(false)
	s.Clear()
	if err := <-res; err != nil {
		t.Fatalf("term write once the disk takes writes: %v", err)
	}
	if got, _ := f.GetUint64(keyCurrentTerm); got != 5 {
		t.Fatalf("stored term %d, want 5", got)
	}
}

// TestTermWriteEndsWithTheMember: a term write still waiting when the
// member stops ends its goroutine (raft's main one) without returning, so
// raft neither panics nor goes on with the term.
func TestTermWriteEndsWithTheMember(t *testing.T) {
	f := newFlakyStable()
	f.setFull(true)
	stop := make(chan struct{})
	g, _ := newStable(f, stop, false)
	res, ended := setTerm(g, 5)
	<-f.tried
	close(stop)
	<-ended
	select {
	case err := <-res:
		t.Fatalf("the waiting term write returned %v when the member stopped", err)
	default:
	}
}

// TestNoCampaignWhileUnwritable: while the member cannot persist, raft's
// own campaign (raft is a candidate) does not even try to store its new
// term, even if that write would succeed: the append after it would not.
func TestNoCampaignWhileUnwritable(t *testing.T) {
	f := newFlakyStable()
	g, s := newStable(f, make(chan struct{}), true)
	s.Fail("append to the raft log", errDiskFull)
	res, _ := setTerm(g, 9)
	// The write is held back before the store, so nothing arrives on
	// f.tried; clearing the state lets it through.
	select {
	case <-f.tried:
		t.Fatalf("a campaign stored its term while the member could not persist")
	case err := <-res:
		t.Fatalf("a campaign's term write returned %v while the member could not persist", err)
	case <-time.After(50 * time.Millisecond): // only to show it is not written at once
	}
	s.Clear()
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if got, _ := f.GetUint64(keyCurrentTerm); got != 9 {
		t.Fatalf("stored term %d, want 9", got)
	}
}

// TestDurableTermNotRewritten: raft rewrites the term it holds (NewRaft,
// a candidate hearing its term's leader); that is no write, so a full disk
// does not hold it up.
func TestDurableTermNotRewritten(t *testing.T) {
	f := newFlakyStable()
	g, s := newStable(f, make(chan struct{}), false)
	if err := g.SetUint64(keyCurrentTerm, 3); err != nil {
		t.Fatal(err)
	}
	<-f.tried
	f.setFull(true)
	s.Fail("append to the raft log", errDiskFull)
	if err := g.SetUint64(keyCurrentTerm, 3); err != nil {
		t.Fatalf("rewriting the stored term on a full disk: %v", err)
	}
	if n := f.attempts(); n != 1 {
		t.Fatalf("%d writes, want 1: the stored term was written again", n)
	}
}

// TestStableErrorsBeforeRaftRuns: before raft runs, and for votes always,
// a failed write returns its error (wrapping ErrCannotPersist) to the
// caller, which handles it.
func TestStableErrorsBeforeRaftRuns(t *testing.T) {
	f := newFlakyStable()
	f.setFull(true)
	g, _ := newStable(f, make(chan struct{}), false)
	if err := g.SetUint64([]byte("LastVoteTerm"), 4); !errors.Is(err, ErrCannotPersist) || !errors.Is(err, errDiskFull) {
		t.Fatalf("vote write on a full disk: %v", err)
	}
	g.running.Store(false)
	if err := g.SetUint64(keyCurrentTerm, 4); !errors.Is(err, ErrCannotPersist) {
		t.Fatalf("term write before raft runs: %v", err)
	}
}

// flakyLog is a log store whose appends fail while full is set.
type flakyLog struct {
	*raft.InmemStore
	mu   sync.Mutex
	full bool
}

func (l *flakyLog) StoreLogs(logs []*raft.Log) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.full {
		return errDiskFull
	}
	return l.InmemStore.StoreLogs(logs)
}

// TestFailedAppendMarksAndSuccessClears: a failed append marks the member
// unable to persist (and tells waiters), its error wraps ErrCannotPersist
// (propose turns that into "not leader"), and a later append that
// succeeds clears the state.
func TestFailedAppendMarksAndSuccessClears(t *testing.T) {
	l := &flakyLog{InmemStore: raft.NewInmemStore(), full: true}
	s := NewHealth(quiet)
	g := s.Guard(l)
	changed := s.Changed()
	if err := g.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand}}); !errors.Is(err, ErrCannotPersist) || !errors.Is(err, errDiskFull) {
		t.Fatalf("failed append: %v", err)
	}
	<-changed
	changed = s.Changed()
	l.mu.Lock()
	l.full = false
	l.mu.Unlock()
	if err := g.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand}}); err != nil {
		t.Fatal(err)
	}
	<-changed
	if err := s.Err(); err != nil {
		t.Fatalf("after a successful append: %v", err)
	}
}

// TestProbeClearsOnceTheDiskTakesWrites: the probe tries the disk on each
// tick while the member cannot persist, reopens the log store when the
// disk takes a write, and clears the state.
func TestProbeClearsOnceTheDiskTakesWrites(t *testing.T) {
	dir := t.TempDir()
	var opens atomic.Int32
	open := func() (backend, error) {
		opens.Add(1)
		return openStore(dir, BoltDB, hclog.NewNullLogger())
	}
	disk, err := open()
	if err != nil {
		t.Fatal(err)
	}
	ticks := make(chan time.Time) // unbuffered: a send returns once the probe took it
	h := NewHealth(quiet)
	s := &Store{
		dir:    filepath.Join(dir, "later"),
		kind:   BoltDB,
		log:    quiet,
		health: h,
		disk:   disk,
		open:   open,
		ticker: func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} },
	}
	stop, probed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(probed)
		s.Probe(stop)
	}()
	defer func() {
		close(stop)
		<-probed
		s.Close()
	}()

	changed := h.Changed()
	h.Fail("append to the raft log", errDiskFull)
	<-changed
	changed = h.Changed()
	// The probe's directory does not exist yet: its writes fail. The
	// second tick is taken only after the first try ended.
	ticks <- time.Time{}
	ticks <- time.Time{}
	if h.Err() == nil || opens.Load() != 1 {
		t.Fatalf("the probe cleared the state (%v) or reopened the store (%d opens) on a disk that takes no writes", h.Err(), opens.Load())
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for cleared := false; !cleared; {
		select {
		case ticks <- time.Time{}:
		case <-changed:
			cleared = true
		}
	}
	if err := h.Err(); err != nil {
		t.Fatalf("after a probe that could write: %v", err)
	}
	if got := opens.Load(); got != 2 {
		t.Fatalf("%d opens, want 2: the store was not reopened", got)
	}
	if _, err := s.LastIndex(); err != nil {
		t.Fatalf("the reopened store: %v", err)
	}
}

// Package history is the record of one run: every client operation, watch
// event and fault, with start and end times on one monotonic clock, written
// as JSON lines while the run goes so that a run cut short still leaves its
// history behind.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Result is what the client learned about an operation.
type Result string

const (
	// OK: the operation took effect (or the read returned) as recorded.
	OK Result = "ok"
	// Fail: a definite answer that the operation did not take effect, or a
	// read that returned nothing; writes are never recorded as failed on a
	// timeout or a transport error, only on an answer from the server
	// (e.g. a lease that is not found).
	Fail Result = "fail"
	// Unknown: the client does not know whether the operation took effect
	// (timeout, broken connection, member crashed). A checker must assume
	// it may take effect at any time after its start, or never.
	Unknown Result = "indeterminate"
)

// Kinds of records.
const (
	KindGet      = "get"        // register read: Value, Rev (mod revision; 0 = absent)
	KindPut      = "put"        // register write: Value; Rev = revision of the write
	KindCASValue = "cas-value"  // txn if value(Key)==Expect then put Value else get
	KindCASRev   = "cas-rev"    // txn if mod_revision(Key)==ExpectRev then put Value else get
	KindAdd      = "add"        // set workload: put of a unique key
	KindRead     = "read"       // final read of a prefix: Keys
	KindWatch    = "watch"      // one watch event: Key, Value, Rev, Event (put/delete)
	KindWatchOp  = "watch-open" // a watcher (re)starts at revision Rev
	KindWatchEnd = "watch-end"  // its stream ended: Error
	KindHistory  = "history"    // event of the final from-revision-1 watch through Member
	KindGrant    = "grant"      // Lease, TTL (granted); Expect = requested TTL as text
	KindLeasePut = "lease-put"  // put of Key attached to Lease
	KindKeep     = "keepalive"  // KeepAliveOnce: TTL from the answer; Fail = not found
	KindRevoke   = "revoke"     // Lease revoke
	KindTTL      = "timetolive" // TTL (-1 = no such lease)
	KindLeaseGet = "lease-get"  // Get(Key) of a lease's key: Found
	KindCanary   = "canary"     // monitor's write used to measure commit availability
	KindStatus   = "status"     // monitor's view of a member: Leader, Term (on change only)
	KindFault    = "fault"      // Detail names the fault; Start..End is when it was in effect
	KindFinal    = "final"      // end-of-run bookkeeping: Rev = final revision

	// The election workload; Key is the election prefix (one per mode),
	// times are the holder process's CLOCK_MONOTONIC made relative to the
	// run's clock (Clock.FromMono).
	KindElected    = "elect-won"   // a holder's campaign returned: Token
	KindAct        = "elect-act"   // an action taken while the holder believed it led: Token; Start = End = its time
	KindFencedPut  = "elect-write" // Txn guarded on the election key's create revision == Token; Swapped = committed, Rev = its revision
	KindElectLost  = "elect-lost"  // the holder noticed it no longer leads (Detail says how); it exits
	KindHolderExit = "holder-exit" // a holder process ended (Detail: how); the workload starts another

	// The cached-read workload reads register keys through client/cache
	// in reader processes and records each read as a KindGet whose Detail
	// is DetailCacheHit or DetailCacheMiss; times are the reader process's
	// CLOCK_MONOTONIC (Clock.FromMono), read before Get is called and
	// after it returned.
	KindReaderExit = "reader-exit" // a reader process ended (Detail: how); Cache: its last counters
)

// Details of a read through client/cache: whether the cache answered from
// memory (its Stats().Hits grew) or asked the leader.
const (
	DetailCacheHit  = "cache hit"
	DetailCacheMiss = "cache miss"
)

// CacheStats are a reader process's client/cache counters (cache.Stats),
// as last reported before it exited.
type CacheStats struct {
	Hits          uint64 `json:"hits"`
	Misses        uint64 `json:"misses"`
	Uncached      uint64 `json:"uncached"`
	Invalidations uint64 `json:"invalidations"`
	Evictions     uint64 `json:"evictions"`
	Reconnects    uint64 `json:"reconnects"`
}

// Add adds o's counters to s.
func (s *CacheStats) Add(o CacheStats) {
	s.Hits += o.Hits
	s.Misses += o.Misses
	s.Uncached += o.Uncached
	s.Invalidations += o.Invalidations
	s.Evictions += o.Evictions
	s.Reconnects += o.Reconnects
}

// Op is one line of the history.
type Op struct {
	ID      int64  `json:"id"`
	Process int    `json:"process"`
	Kind    string `json:"kind"`
	Member  int    `json:"member"` // index of the member the client was pinned to; -1 = any
	Key     string `json:"key,omitempty"`
	Value   string `json:"value,omitempty"`
	// Start and End are nanoseconds since the run began. For an Unknown
	// result End is when the client gave up, not when the op took effect.
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Result Result `json:"result"`

	Rev       int64  `json:"rev,omitempty"`
	Expect    string `json:"expect,omitempty"`
	ExpectRev int64  `json:"expect_rev,omitempty"`
	Swapped   bool   `json:"swapped,omitempty"`
	// Read and ReadRev are what a CAS's else branch read (Found: the key
	// existed), so a failed CAS is checked as an observation too.
	Read    string   `json:"read,omitempty"`
	ReadRev int64    `json:"read_rev,omitempty"`
	Found   bool     `json:"found,omitempty"`
	Event   string   `json:"event,omitempty"`
	Lease   int64    `json:"lease,omitempty"`
	TTL     int64    `json:"ttl,omitempty"`
	Leader  uint64   `json:"leader,omitempty"`
	Term    uint64   `json:"term,omitempty"`
	Keys    []string `json:"keys,omitempty"`
	Values  []string `json:"values,omitempty"`
	Error   string   `json:"error,omitempty"`
	Detail  string   `json:"detail,omitempty"`
	// Token is an election holder's fencing token: the create revision
	// of its election key.
	Token int64 `json:"token,omitempty"`
	// Cache is a reader process's client/cache counters (KindReaderExit).
	Cache *CacheStats `json:"cache,omitempty"`
}

// Clock is the run's monotonic clock: every time in a history is read from
// one Clock, so intervals from different clients compare. Times taken in
// other processes (election holders) are CLOCK_MONOTONIC readings, which
// FromMono puts on the same scale: Go's monotonic time on Linux is
// CLOCK_MONOTONIC too, so the two differ by the moment each started.
type Clock struct {
	base     time.Time
	monoBase int64
}

// NewClock starts the run's clock now.
func NewClock() *Clock {
	// The two readings bracket time.Now, so their midpoint is its
	// CLOCK_MONOTONIC value within a microsecond or so.
	before := Mono()
	base := time.Now()
	after := Mono()
	return &Clock{base: base, monoBase: before + (after-before)/2}
}

// Now is nanoseconds since the clock started (monotonic).
func (c *Clock) Now() int64 { return int64(time.Since(c.base)) }

// FromMono converts a CLOCK_MONOTONIC reading of this machine, from any
// process, to nanoseconds since the clock started.
func (c *Clock) FromMono(mono int64) int64 { return mono - c.monoBase }

// Mono is this machine's CLOCK_MONOTONIC in nanoseconds: one clock for
// every process on the machine, which a wall-clock step does not move and
// which runs on while a process is stopped.
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// Linux always has CLOCK_MONOTONIC; without it no time in the
		// history could be trusted.
		panic(fmt.Sprintf("history: clock_gettime(CLOCK_MONOTONIC): %v", err))
	}
	return ts.Nano()
}

// Recorder collects ops from many goroutines and streams them to a file.
type Recorder struct {
	clock *Clock

	mu     sync.Mutex
	nextID int64
	ops    []Op
	f      *os.File
	w      *bufio.Writer
	err    error
}

// NewRecorder writes the history to path (JSON lines).
func NewRecorder(clock *Clock, path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("history: create %s: %w", path, err)
	}
	return &Recorder{clock: clock, f: f, w: bufio.NewWriterSize(f, 1<<16)}, nil
}

// Clock is the clock every op's times come from.
func (r *Recorder) Clock() *Clock { return r.clock }

// Add records a finished op and returns its ID.
func (r *Recorder) Add(op Op) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	op.ID = r.nextID
	r.ops = append(r.ops, op)
	if r.err == nil && r.w != nil {
		b, err := json.Marshal(op)
		if err == nil {
			b = append(b, '\n')
			_, err = r.w.Write(b)
		}
		r.err = err
	}
	return op.ID
}

// Flush pushes buffered lines to the file; safe to call from a deadline
// handler while clients still record.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil {
		return r.err
	}
	if err := r.w.Flush(); err != nil && r.err == nil {
		r.err = err
	}
	return r.err
}

// Close flushes and closes the file; later Adds are kept in memory only.
func (r *Recorder) Close() error {
	err := r.Flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		if cerr := r.f.Close(); err == nil {
			err = cerr
		}
		r.f, r.w = nil, nil
	}
	if err != nil {
		return fmt.Errorf("history: write: %w", err)
	}
	return nil
}

// Ops returns a copy of the history sorted by start time (then ID).
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	out := append([]Op(nil), r.ops...)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start < out[j].Start
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Len is the number of ops recorded so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Load reads a history written by a Recorder, for re-checking a saved run.
func Load(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: open %s: %w", path, err)
	}
	defer f.Close()
	var ops []Op
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return nil, fmt.Errorf("history: %s line %d: %w", path, line, err)
		}
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history: read %s: %w", path, err)
	}
	sort.SliceStable(ops, func(i, j int) bool {
		if ops[i].Start != ops[j].Start {
			return ops[i].Start < ops[j].Start
		}
		return ops[i].ID < ops[j].ID
	})
	return ops, nil
}

// Dur formats a history time for messages.
func Dur(ns int64) string {
	return time.Duration(ns).Round(time.Millisecond).String()
}

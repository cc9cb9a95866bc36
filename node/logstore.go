package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	waltypes "github.com/hashicorp/raft-wal/types"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"
)

// The log stores a member can keep its raft log and stable state in, by the
// names --log-store takes.
const (
	// LogStoreWAL is hashicorp/raft-wal: append-only segment files under
	// <data-dir>/wal/, one fsync per append, and its small meta database
	// (bolt, written on segment rotation, truncation and raft's term and
	// vote) as the stable store.
	LogStoreWAL = "wal"
	// LogStoreBoltDB is hashicorp/raft-boltdb: <data-dir>/raft.db, one bolt
	// transaction (two fdatasyncs) per append, log and stable state alike.
	LogStoreBoltDB = "boltdb"
)

// DefaultLogStore is the store a new data dir gets when none is named:
// raft-wal, which commits a one-entry append with one fsync where bolt
// needs two and measured faster on put-1, put and lease-grant
// (docs/BENCHMARKS.md, "Log stores").
const DefaultLogStore = LogStoreWAL

// walDir and boltFile are where each store lives inside the data dir; their
// presence is how a data dir says which store it was created with.
const (
	walDir   = "wal"
	boltFile = "raft.db"
	// walMetaFile is raft-wal's meta database in walDir (metadb.FileName).
	walMetaFile = metadb.FileName
)

// walSegmentSize bounds a wal segment file. raft-wal preallocates every
// segment and deletes only whole sealed segments after a snapshot, so the
// size is also how much log a member keeps beyond what raft needs. 16 MiB
// holds about 50,000 entries of a 256-byte put, several snapshot intervals
// at the default --snapshot-count, where raft-wal's own 64 MiB default
// would make every member's log at least 64 MiB on disk.
const walSegmentSize = 16 << 20

// logStore is one member's raft log and stable store in one. Both
// implementations are safe for concurrent use as raft requires: raft's
// goroutines append, read and truncate concurrently, and StoreLogs returns
// only once the entries are durable (fsynced).
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// MismatchError is a data dir that holds a log store other than the one
// asked for. A data dir keeps the store it was created with; corenode does
// not convert one into the other.
type MismatchError struct {
	DataDir string
	Holds   string // the store found in DataDir
	Asked   string // the store asked for
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("data dir %s holds a %s log store but --log-store %s was given: "+
		"start with --log-store %s (or without --log-store), or move the data dir away and re-add this member to use %s",
		e.DataDir, e.Holds, e.Asked, e.Holds, e.Asked)
}

// CorruptLogError is a raft log that failed its checks when the member
// opened it: a checksum or a record that does not decode. The member cannot
// serve from it; its data must go and the cluster must send it a fresh copy.
type CorruptLogError struct {
	DataDir string
	Store   string
	ID      uint64 // the member's ID, for the commands
	Err     error
}

func (e *CorruptLogError) Error() string {
	return fmt.Sprintf("the raft log (%s) in %s is damaged: %v; this member must not start on it: "+
		"remove it from the cluster (etcdctl member remove %x), delete the data dir %s, "+
		"then add it again (etcdctl member add) and start it with --initial-cluster-state existing",
		e.Store, e.DataDir, e.Err, e.ID, e.DataDir)
}

func (e *CorruptLogError) Unwrap() error { return e.Err }

// errStoreLocked is a log store another process has open.
var errStoreLocked = errors.New("another process holds it (is a member already running on this data dir?)")

// heldLogStore reports which store dataDir holds: "" for none (a new or
// restored-from-snapshot-only data dir).
func heldLogStore(dataDir string) (string, error) {
	var held []string
	for _, s := range []struct{ kind, path string }{{LogStoreBoltDB, boltFile}, {LogStoreWAL, walDir}} {
		if _, err := os.Stat(filepath.Join(dataDir, s.path)); err == nil {
			held = append(held, s.kind)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("inspect data dir: %w", err)
		}
	}
	switch len(held) {
	case 0:
		return "", nil
	case 1:
		return held[0], nil
	default:
		return "", fmt.Errorf("data dir %s holds both a boltdb (%s) and a wal (%s/) log store; "+
			"keep the one the member wrote last and move the other away", dataDir, boltFile, walDir)
	}
}

// chooseLogStore is the store a member on dataDir opens when asked for
// asked: an existing data dir's own store, which asked must match when it
// names one; an empty data dir's is asked, or DefaultLogStore.
func chooseLogStore(dataDir, asked string) (string, error) {
	switch asked {
	case "", LogStoreWAL, LogStoreBoltDB:
	default:
		return "", fmt.Errorf("unknown log store %q (have %s, %s)", asked, LogStoreWAL, LogStoreBoltDB)
	}
	held, err := heldLogStore(dataDir)
	if err != nil {
		return "", err
	}
	switch {
	case held != "" && asked != "" && held != asked:
		return "", &MismatchError{DataDir: dataDir, Holds: held, Asked: asked}
	case held != "":
		return held, nil
	case asked != "":
		return asked, nil
	default:
		return DefaultLogStore, nil
	}
}

// openLogStore opens the raft log and stable store of kind in dataDir,
// creating it when missing, and reads every entry back (verifyLog) so a
// damaged log stops the member here with a CorruptLogError rather than in
// raft, which panics on a log it cannot read while it starts.
func openLogStore(dataDir, kind string, logger hclog.Logger) (logStore, error) {
	var s logStore
	var err error
	switch kind {
	case LogStoreBoltDB:
		s, err = openBolt(dataDir)
	case LogStoreWAL:
		var w walStore
		if w, err = openWAL(filepath.Join(dataDir, walDir), logger); err == nil {
			s = checkedStore{w}
		}
	default:
		return nil, fmt.Errorf("unknown log store %q", kind)
	}
	if err != nil {
		if errors.Is(err, wal.ErrCorrupt) || errors.Is(err, errEntryChecksum) || errors.Is(err, errLogShortened) ||
			errors.Is(err, errBoltDamaged) {
			return nil, &CorruptLogError{DataDir: dataDir, Store: kind, Err: err}
		}
		return nil, err
	}
	if err := verifyLog(s); err != nil {
		s.Close()
		return nil, &CorruptLogError{DataDir: dataDir, Store: kind, Err: err}
	}
	return s, nil
}

// InitLogStore creates the log store kind ("" for the default) in an
// empty data dir, so the member started on it later keeps that store.
func InitLogStore(dataDir, kind string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("node: data dir: %w", err)
	}
	kind, err := chooseLogStore(dataDir, kind)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	s, err := openLogStore(dataDir, kind, hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("node: create %s log store: %w", kind, err)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("node: close %s log store: %w", kind, err)
	}
	return nil
}

// verifyLog reads every entry of s, which decodes each and, for the wal,
// checks each entry's checksum (checkedStore).
func verifyLog(s raft.LogStore) error {
	first, err := s.FirstIndex()
	if err != nil {
		return fmt.Errorf("first index: %w", err)
	}
	last, err := s.LastIndex()
	if err != nil {
		return fmt.Errorf("last index: %w", err)
	}
	if first == 0 {
		return nil
	}
	var l raft.Log
	for i := first; i <= last; i++ {
		if err := s.GetLog(i, &l); err != nil {
			return fmt.Errorf("entry %d of %d..%d: %w", i, first, last, err)
		}
		if l.Index != i {
			return fmt.Errorf("entry %d of %d..%d: holds index %d", i, first, last, l.Index)
		}
	}
	return nil
}

// openBolt opens the raft-boltdb store in dir, creating it when missing;
// an existing raft.db must pass checkBolt first, so that damage bbolt would
// panic on is an error instead.
//
// Not syncing bolt's freelist, as etcd does not, saves a page write per
// append (about 30% of append time measured here); the cost is a scan to
// rebuild the freelist when the file opens. An append is still a bolt
// commit: its pages, an fdatasync, the meta page, another fdatasync
// (BenchmarkLogAppend).
func openBolt(dir string) (*raftboltdb.BoltStore, error) {
	path := filepath.Join(dir, boltFile)
	err := checkBoltLocked(path, boltFile)
	if errors.Is(err, fs.ErrNotExist) {
		err = createBolt(dir)
	}
	if err != nil {
		return nil, err
	}
	s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: boltOptions()})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, errStoreLocked
	}
	return s, err
}

func boltOptions() *bbolt.Options {
	return &bbolt.Options{Timeout: 5 * time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}
}

// checkBoltLocked is checkBolt under a shared lock of the file, which a
// running member holds exclusively (bbolt's flock): a member already
// running on the data dir is errStoreLocked, at once, and not a file read
// while it writes. The lock goes before bbolt takes its own.
func checkBoltLocked(path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return errStoreLocked
		}
		return fmt.Errorf("lock %s: %w", name, err)
	}
	return checkBolt(path, name)
}

// createBolt creates an empty raft.db in dir whole or not at all: under a
// temporary name, renamed into place once bbolt has written and synced it,
// then the directory synced. A crash while bbolt initializes a file leaves
// it empty or half written, which checkBolt must be able to call damage.
func createBolt(dir string) error {
	tmp := filepath.Join(dir, boltFile+".tmp")
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove an unfinished %s: %w", tmp, err)
	}
	s, err := raftboltdb.New(raftboltdb.Options{Path: tmp, BoltOptions: boltOptions()})
	if err != nil {
		return fmt.Errorf("create %s: %w", boltFile, err)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("create %s: %w", boltFile, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, boltFile)); err != nil {
		return fmt.Errorf("create %s: %w", boltFile, err)
	}
	return syncDir(dir)
}

// syncDir makes dir's entries durable (a file created or renamed in it).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// walStore is raft-wal with two additions.
//
// A second process is refused at once: raft-wal opens the meta database
// with no lock timeout, so a second member on the same data dir would wait
// forever instead of failing. The flock is on the file last.
//
// last also holds (8 bytes, little-endian) an index the log is known to
// have reached durably, and a log that opens shorter is refused. raft-wal
// reads the newest segment from its start when it opens, stops at the first
// frame it cannot parse and takes the rest for a torn write, so one changed
// byte in a frame header would otherwise drop every entry after it without
// a word. The index is written after each append returns (no fsync of its
// own: a stale value after a power loss is lower, which is safe) and
// lowered, with an fsync, before a truncation that removes the end of the
// log, so it never exceeds what the log durably holds.
//
// Concurrency: as raft.LogStore; mu orders the writes of last with the
// truncations (raft appends from one goroutine and compacts the head from
// another).
type walStore struct {
	*wal.WAL
	last *os.File
	mu   *sync.Mutex
	log  hclog.Logger
}

// errLogShortened is a wal log that opened shorter than it was written.
var errLogShortened = errors.New("log shorter than written")

func (s walStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s walStore) StoreLogs(logs []*raft.Log) error {
	if err := s.WAL.StoreLogs(logs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last, err := s.WAL.LastIndex()
	if err == nil {
		err = s.writeLast(last, false)
	}
	if err != nil {
		// The entries are durable; failing the append would make raft
		// retry it. A stale last index only weakens the check.
		s.log.Warn("record the wal's last index", "error", err)
	}
	return nil
}

func (s walStore) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	first, err := s.WAL.FirstIndex()
	if err != nil {
		return err
	}
	last, err := s.WAL.LastIndex()
	if err != nil {
		return err
	}
	if min <= max && min <= last && max >= last {
		keep := uint64(0)
		if min > first {
			keep = min - 1
		}
		if err := s.writeLast(keep, true); err != nil {
			return fmt.Errorf("record the wal's last index before truncating it: %w", err)
		}
	}
	return s.WAL.DeleteRange(min, max)
}

func (s walStore) writeLast(index uint64, sync bool) error {
	if _, err := s.last.WriteAt(binary.LittleEndian.AppendUint64(nil, index), 0); err != nil {
		return err
	}
	if sync {
		return s.last.Sync()
	}
	return nil
}

// readLast is the index last holds; 0 for a new store.
func readLast(f *os.File) (uint64, error) {
	var b [8]byte
	n, err := f.ReadAt(b[:], 0)
	if n == 0 && errors.Is(err, io.EOF) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (s walStore) Close() error {
	err := s.WAL.Close()
	if cerr := s.last.Close(); err == nil {
		err = cerr
	}
	return err
}

// openWAL opens (creating) the raft-wal store in dir.
//
// raft-wal fsyncs every append before StoreLogs returns (a commit frame with
// a CRC of the batch, then fsync), and on opening checks only the last
// batch of the newest segment: a torn last batch is dropped as never
// acknowledged. It reads records back without a checksum, so openLogStore
// wraps it in checkedStore.
func openWAL(dir string, logger hclog.Logger) (walStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return walStore{}, fmt.Errorf("wal dir: %w", err)
	}
	lastFile, err := os.OpenFile(filepath.Join(dir, "last-index"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return walStore{}, fmt.Errorf("wal last index: %w", err)
	}
	if err := syscall.Flock(int(lastFile.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lastFile.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return walStore{}, errStoreLocked
		}
		return walStore{}, fmt.Errorf("wal lock: %w", err)
	}
	written, err := readLast(lastFile)
	if err != nil {
		lastFile.Close()
		return walStore{}, fmt.Errorf("wal last index: %w", err)
	}
	// raft-wal opens its meta database with bbolt, which panics on a
	// damaged one (checkBolt); it creates a missing one itself.
	err = checkBolt(filepath.Join(dir, walMetaFile), walDir+"/"+walMetaFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		lastFile.Close()
		return walStore{}, err
	}
	// raft-wal 0.4.2 leaves its meta database open when Open fails after
	// opening it (a state it cannot parse, a segment it cannot read), and
	// with it bbolt's flock: the storage probe's next try to open the log
	// (reopenableStore) would wait on that lock forever, as raft-wal opens
	// it with no timeout. Passing the meta database in lets this close it.
	meta := &metadb.BoltMetaDB{}
	err = finishRotation(dir, meta, logger)
	if err != nil {
		meta.Close()
		lastFile.Close()
		return walStore{}, err
	}
	w, err := wal.Open(dir, wal.WithSegmentSize(walSegmentSize), wal.WithLogger(logger), wal.WithMetaStore(meta))
	if err != nil {
		meta.Close()
		lastFile.Close()
		return walStore{}, err
	}
	s := walStore{WAL: w, last: lastFile, mu: new(sync.Mutex), log: logger}
	if got, err := w.LastIndex(); err != nil || got < written {
		s.Close()
		if err != nil {
			return walStore{}, err
		}
		return walStore{}, fmt.Errorf("%w: it ends at entry %d, but entries up to %d were written "+
			"(raft-wal stopped reading the newest segment at a frame it could not parse)", errLogShortened, got, written)
	}
	return s, nil
}

// finishRotation completes a segment rotation that raft-wal 0.4.2 left
// half done, before raft-wal opens the log.
//
// raft-wal rotates in two steps: the full segment's last append also
// writes its index and seals the file, then the meta database records the
// segment as sealed and the next one as the tail. A crash or a failed meta
// write between the two (a full disk) leaves the meta database calling the
// sealed file the open tail. raft-wal's Open recovers that file as the
// tail, finds it sealed, and every append after it fails with "segment is
// sealed", across reopens and restarts, though the comment in its
// runRotate says recovery handles the case. This records what the
// rotation would have: the tail sealed at its last entry and its index,
// and an empty next segment, which raft-wal's Open then creates as it does
// after a crash that cut a rotation short after the meta write. The
// sealed file's entries are read back through its index by verifyLog, so
// a seal that was itself torn is reported as a damaged log.
//
// meta is left open for wal.Open to use.
func finishRotation(dir string, meta *metadb.BoltMetaDB, logger hclog.Logger) error {
	st, err := meta.Load(dir)
	if err != nil {
		return err
	}
	n := len(st.Segments)
	if n == 0 || !st.Segments[n-1].SealTime.IsZero() {
		return nil
	}
	tail := st.Segments[n-1]
	w, err := segment.NewFiler(dir, walfs.New()).RecoverTail(tail)
	if err != nil {
		// A missing tail file is raft-wal's to create; any other failure
		// is raft-wal's to report, as its Open meets it too.
		return nil
	}
	sealed, indexStart, err := w.Sealed()
	last := w.LastIndex()
	w.Close()
	// A seal always follows an append, so a sealed tail holds entries.
	if err != nil || !sealed || last < tail.BaseIndex {
		return nil
	}
	now := time.Now()
	tail.SealTime, tail.MaxIndex, tail.IndexStart = now, last, indexStart
	st.Segments[n-1] = tail
	st.Segments = append(st.Segments, waltypes.SegmentInfo{
		ID:         st.NextSegmentID,
		BaseIndex:  last + 1,
		MinIndex:   last + 1,
		SizeLimit:  walSegmentSize,
		Codec:      wal.CodecBinaryV1,
		CreateTime: now,
	})
	st.NextSegmentID++
	if err := meta.CommitState(st); err != nil {
		return fmt.Errorf("record the sealed wal segment %d (entries %d..%d) in %s: %w", tail.ID, tail.MinIndex, last, walMetaFile, err)
	}
	logger.Warn("finished a wal segment rotation that was cut short: the sealed segment is recorded and appends go to a new one",
		"segment", tail.ID, "last-index", last)
	return nil
}

// errEntryChecksum is a wal entry whose bytes differ from those written.
var errEntryChecksum = errors.New("entry checksum mismatch")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entrySumMagic marks the checksum trailer checkedStore adds to an entry's
// Extensions.
const entrySumMagic = 0xc5

// checkedStore adds a CRC-32C of every entry (index, term, type, data,
// extensions, append time) to what the store keeps, and checks it on every
// read. raft-wal's own CRCs cover a write batch and are checked only for
// the newest batch when the log opens, to tell a torn write; a byte changed
// later in an older entry would otherwise read back as a different entry
// and be applied. (raft-wal's pluggable Codec would be the natural place,
// but 0.4.2 records every segment as written with its built-in codec and
// then refuses to reopen a log written with any other.)
//
// The sum travels in raft.Log.Extensions, which hashicorp/raft stores and
// never reads; checkedStore copies entries before adding it, so raft's own
// (cached, replicated) entries never carry it. Concurrency is the wrapped
// store's: the methods keep no state of their own.
type checkedStore struct {
	logStore
}

func (s checkedStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s checkedStore) StoreLogs(logs []*raft.Log) error {
	summed := make([]raft.Log, len(logs))
	ptrs := make([]*raft.Log, len(logs))
	for i, l := range logs {
		summed[i] = *l
		ext := make([]byte, len(l.Extensions), len(l.Extensions)+5)
		copy(ext, l.Extensions)
		ext = append(ext, entrySumMagic)
		summed[i].Extensions = binary.LittleEndian.AppendUint32(ext, entrySum(l, l.Extensions))
		ptrs[i] = &summed[i]
	}
	return s.logStore.StoreLogs(ptrs)
}

// IsMonotonic passes raft-wal's answer through (see timedLogStore).
func (s checkedStore) IsMonotonic() bool { return isMonotonic(s.logStore) }

func (s checkedStore) GetLog(index uint64, l *raft.Log) error {
	if err := s.logStore.GetLog(index, l); err != nil {
		return err
	}
	ext := l.Extensions
	if len(ext) < 5 || ext[len(ext)-5] != entrySumMagic {
		return fmt.Errorf("%w: no checksum stored", errEntryChecksum)
	}
	orig, sum := ext[:len(ext)-5], binary.LittleEndian.Uint32(ext[len(ext)-4:])
	if got := entrySum(l, orig); got != sum || l.Index != index {
		return fmt.Errorf("%w: crc32c %08x, written %08x", errEntryChecksum, got, sum)
	}
	if len(orig) == 0 {
		orig = nil
	}
	l.Extensions = orig
	return nil
}

// entrySum is the CRC-32C of l's fields, with ext as its extensions.
func entrySum(l *raft.Log, ext []byte) uint32 {
	var head [8 + 8 + 1 + 8 + 8 + 8]byte
	binary.LittleEndian.PutUint64(head[0:], l.Index)
	binary.LittleEndian.PutUint64(head[8:], l.Term)
	head[16] = byte(l.Type)
	binary.LittleEndian.PutUint64(head[17:], uint64(l.AppendedAt.UnixNano()))
	binary.LittleEndian.PutUint64(head[25:], uint64(len(l.Data)))
	binary.LittleEndian.PutUint64(head[33:], uint64(len(ext)))
	sum := crc32.Update(0, castagnoli, head[:])
	sum = crc32.Update(sum, castagnoli, l.Data)
	return crc32.Update(sum, castagnoli, ext)
}

// logStoreSize is the bytes the store of kind keeps in dataDir.
func logStoreSize(dataDir, kind string) int64 {
	if kind == LogStoreBoltDB {
		if fi, err := os.Stat(filepath.Join(dataDir, boltFile)); err == nil {
			return fi.Size()
		}
		return 0
	}
	var total int64
	entries, _ := os.ReadDir(filepath.Join(dataDir, walDir))
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			total += fi.Size()
		}
	}
	return total
}

// timedLogStore records how long every append to the log takes
// (corenode_disk_fsync_seconds): either store makes each batch durable
// before it returns, so this is the disk latency every write waits for.
type timedLogStore struct {
	raft.LogStore
	h prometheus.Histogram
}

func (s timedLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s timedLogStore) StoreLogs(ls []*raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLogs(ls)
	s.h.Observe(time.Since(start).Seconds())
	return err
}

// IsMonotonic passes the store's answer through: raft-wal refuses an
// append that leaves a gap, and raft, told so, clears the log after
// installing a snapshot instead of appending past a gap.
func (s timedLogStore) IsMonotonic() bool { return isMonotonic(s.LogStore) }

// isMonotonic is whether s refuses appends that leave a gap
// (raft.MonotonicLogStore); raft looks only at the store it is given, so
// every wrapper passes this through.
func isMonotonic(s raft.LogStore) bool {
	m, ok := s.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

package logstore

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
)

// The log stores a member can keep its raft log and stable state in, by the
// names --log-store takes.
const (
	// WAL is hashicorp/raft-wal: append-only segment files under
	// <data-dir>/wal/, one fsync per append, and its small meta database
	// (bolt, written on segment rotation, truncation and raft's term and
	// vote) as the stable store.
	WAL = "wal"
	// BoltDB is hashicorp/raft-boltdb: <data-dir>/raft.db, one bolt
	// transaction (two fdatasyncs) per append, log and stable state alike.
	BoltDB = "boltdb"
)

// Default is the store a new data dir gets when none is named:
// raft-wal, which commits a one-entry append with one fsync where bolt
// needs two and measured faster on put-1, put and lease-grant
// (docs/BENCHMARKS.md, "Log stores").
const Default = WAL

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

// backend is one member's raft log and stable store in one. Both
// implementations are safe for concurrent use as raft requires: raft's
// goroutines append, read and truncate concurrently, and StoreLogs returns
// only once the entries are durable (fsynced).
type backend interface {
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

// CorruptError is a raft log that failed its checks when the member
// opened it: a checksum or a record that does not decode. The member cannot
// serve from it; its data must go and the cluster must send it a fresh copy.
type CorruptError struct {
	DataDir string
	// LogDir is where the log is when not in DataDir (--wal-dir); empty
	// otherwise.
	LogDir string
	Store  string
	ID     uint64 // the member's ID, for the commands
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("the raft log (%s) in %s is damaged: %v; this member must not start on it: "+
		"remove it from the cluster (etcdctl member remove %x), delete %s, "+
		"then add it again (etcdctl member add) and start it with --initial-cluster-state existing",
		e.Store, cmp.Or(e.LogDir, e.DataDir), e.Err, e.ID, WhatToDelete(e.DataDir, e.LogDir))
}

// WhatToDelete names what an operator deletes to start a member afresh:
// its data dir and, when the raft log lives elsewhere (--wal-dir, logDir;
// empty or dataDir for none), what that dir holds. Deleting the data dir
// alone would leave the old log there, and the member started again with
// --wal-dir would open it as its own.
func WhatToDelete(dataDir, logDir string) string {
	if logDir == "" || filepath.Clean(logDir) == filepath.Clean(dataDir) {
		return "the data dir " + dataDir
	}
	return "the data dir " + dataDir + " and the contents of the wal dir " + logDir + " (--wal-dir)"
}

func (e *CorruptError) Unwrap() error { return e.Err }

// errStoreLocked is a log store another process has open.
var errStoreLocked = errors.New("another process holds it (is a member already running on this data dir?)")

// heldStore reports which store dataDir holds: "" for none (a new or
// restored-from-snapshot-only data dir).
func heldStore(dataDir string) (string, error) {
	var held []string
	for _, s := range []struct{ kind, path string }{{BoltDB, boltFile}, {WAL, walDir}} {
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

// choose is the store a member on dataDir opens when asked for
// asked: an existing data dir's own store, which asked must match when it
// names one; an empty data dir's is asked, or Default.
func choose(dataDir, asked string) (string, error) {
	switch asked {
	case "", WAL, BoltDB:
	default:
		return "", fmt.Errorf("unknown log store %q (have %s, %s)", asked, WAL, BoltDB)
	}
	held, err := heldStore(dataDir)
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
		return Default, nil
	}
}

// openStore opens the raft log and stable store of kind in dataDir, as
// openStoreNoSync, with every write fsynced.
func openStore(dataDir, kind string, logger hclog.Logger) (backend, error) {
	return openStoreNoSync(dataDir, kind, logger, false)
}

// openStoreNoSync opens the raft log and stable store of kind in dataDir,
// creating it when missing, and reads every entry back (verifyLog) so a
// damaged log stops the member here with a CorruptError rather than in
// raft, which panics on a log it cannot read while it starts. With noSync
// (etcd's --unsafe-no-fsync) the store writes without fsync: see
// Config.NoSync.
func openStoreNoSync(dataDir, kind string, logger hclog.Logger, noSync bool) (backend, error) {
	var s backend
	var err error
	switch kind {
	case BoltDB:
		s, err = openBolt(dataDir, noSync)
	case WAL:
		var w walStore
		if w, err = openWAL(filepath.Join(dataDir, walDir), logger, noSync); err == nil {
			s = checkedStore{w}
		}
	default:
		return nil, fmt.Errorf("unknown log store %q", kind)
	}
	if err != nil {
		if errors.Is(err, wal.ErrCorrupt) || errors.Is(err, errEntryChecksum) || errors.Is(err, errLogShortened) ||
			errors.Is(err, errBoltDamaged) {
			return nil, &CorruptError{DataDir: dataDir, Store: kind, Err: err}
		}
		return nil, err
	}
	if err := verifyLog(s); err != nil {
		s.Close()
		return nil, &CorruptError{DataDir: dataDir, Store: kind, Err: err}
	}
	return s, nil
}

// Init creates the log store kind ("" for Default) in an empty data dir,
// so the member started on it later keeps that store (a data dir restored
// from a snapshot holds no log yet).
func Init(dataDir, kind string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("logstore: data dir: %w", err)
	}
	kind, err := choose(dataDir, kind)
	if err != nil {
		return fmt.Errorf("logstore: %w", err)
	}
	s, err := openStore(dataDir, kind, hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("logstore: create %s log store: %w", kind, err)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("logstore: close %s log store: %w", kind, err)
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
// (BenchmarkLogAppend). With noSync, neither (raft-boltdb's NoSync, which
// etcd's --unsafe-no-fsync sets on its own bolt file too).
func openBolt(dir string, noSync bool) (*raftboltdb.BoltStore, error) {
	path := filepath.Join(dir, boltFile)
	err := checkBoltLocked(path, boltFile)
	if errors.Is(err, fs.ErrNotExist) {
		err = createBolt(dir)
	}
	if err != nil {
		return nil, err
	}
	s, err := raftboltdb.New(boltStoreOptions(path, noSync))
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, errStoreLocked
	}
	return s, err
}

// boltStoreOptions are the options of the raft.db at path.
func boltStoreOptions(path string, noSync bool) raftboltdb.Options {
	return raftboltdb.Options{Path: path, BoltOptions: boltOptions(), NoSync: noSync}
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

// diskSize is the bytes the store of kind keeps in dataDir.
func diskSize(dataDir, kind string) int64 {
	if kind == BoltDB {
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

// isMonotonic is whether s refuses appends that leave a gap
// (raft.MonotonicLogStore): raft-wal does, and raft, told so, clears the
// log after installing a snapshot instead of appending past a gap. raft
// looks only at the store it is given, so every wrapper passes this
// through.
func isMonotonic(s raft.LogStore) bool {
	m, ok := s.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

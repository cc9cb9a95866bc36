package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

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
	last   *os.File
	mu     *sync.Mutex
	log    hclog.Logger
	noSync bool // --unsafe-no-fsync: last is not synced either
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
	if sync && !s.noSync {
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
// acknowledged. It reads records back without a checksum, so openStore
// wraps it in checkedStore. With noSync, nothing is fsynced: see noSyncFS
// and noSyncMeta.
func openWAL(dir string, logger hclog.Logger, noSync bool) (walStore, error) {
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
	// (Store.reopen) would wait on that lock forever, as raft-wal opens
	// it with no timeout. Passing the meta database in lets this close it.
	meta := &metadb.BoltMetaDB{}
	err = finishRotation(dir, meta, logger)
	if err != nil {
		meta.Close()
		lastFile.Close()
		return walStore{}, err
	}
	var vfs types.VFS = walFS()
	if noSync {
		if err := noSyncMeta(meta); err != nil {
			meta.Close()
			lastFile.Close()
			return walStore{}, err
		}
		vfs = noSyncFS{vfs}
	}
	w, err := wal.Open(dir, wal.WithSegmentSize(walSegmentSize), wal.WithLogger(logger), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(segment.NewFiler(dir, vfs)))
	if err != nil {
		meta.Close()
		lastFile.Close()
		return walStore{}, err
	}
	s := walStore{WAL: w, last: lastFile, mu: new(sync.Mutex), log: logger, noSync: noSync}
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
	st.Segments = append(st.Segments, types.SegmentInfo{
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

// walFS is the file system raft-wal writes its segments through; tests
// replace it to count fsyncs.
var walFS = func() types.VFS { return walfs.New() }

// noSyncFS is raft-wal's file system for --unsafe-no-fsync: segment files
// whose Sync does nothing. raft-wal has no option of its own for it; an
// append is otherwise its frames, then one fsync (of the file, and of the
// directory on a new segment's first append).
type noSyncFS struct{ types.VFS }

func (fs noSyncFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := fs.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (fs noSyncFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := fs.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

type noSyncFile struct{ types.WritableFile }

func (noSyncFile) Sync() error { return nil }

// noSyncMeta turns off the fsync of raft-wal's meta database, open, for
// --unsafe-no-fsync: raft's term and vote and the segment list, as etcd's
// flag leaves its own bolt file unsynced. raft-wal opens the database
// itself and keeps the handle unexported, so it is reached by reflection;
// an upgrade that renames or retypes the field is an error here, and
// TestNoSyncWAL fails.
func noSyncMeta(meta *metadb.BoltMetaDB) error {
	f := reflect.ValueOf(meta).Elem().FieldByName("db")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*bbolt.DB]() {
		return errors.New("--unsafe-no-fsync: raft-wal's meta database has no bbolt handle to turn fsync off on")
	}
	db := *(**bbolt.DB)(unsafe.Pointer(f.UnsafeAddr()))
	if db == nil {
		return errors.New("--unsafe-no-fsync: raft-wal's meta database is not open")
	}
	db.NoSync = true
	return nil
}

//go:build linux

package node

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkLogAppend is what one raft append costs on this machine's disk:
// an append of one entry (300 bytes, a put's size in bench-vs-etcd) and of a
// batch of 64 (what a leader under load appends at once) to each log store
// as members open it, and for scale the write-ahead-log append etcd makes
// instead: one write to a preallocated file and one fdatasync. writers=3 is
// three members appending at once on one disk, as in bench-vs-etcd, where a
// write commits only after the leader's own append. ns/op is the time one
// append takes.
//
//	go test -run '^$' -bench LogAppend -benchtime 2000x ./node/
func BenchmarkLogAppend(b *testing.B) {
	data := make([]byte, 300)
	for _, writers := range []int{1, 3} {
		for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
			for _, batch := range []int{1, 64} {
				b.Run(fmt.Sprintf("%s/batch=%d/writers=%d", kind, batch, writers), func(b *testing.B) {
					appends := make([]func(i int) error, writers)
					for w := range appends {
						s, err := openLogStore(b.TempDir(), kind, hclog.NewNullLogger())
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { s.Close() })
						logs := make([]*raft.Log, batch)
						appends[w] = func(i int) error {
							for j := range logs {
								logs[j] = &raft.Log{Index: uint64(i*batch + j + 1), Term: 1, Type: raft.LogCommand, Data: data}
							}
							return s.StoreLogs(logs)
						}
					}
					runWriters(b, appends)
				})
			}
		}
		b.Run(fmt.Sprintf("etcd-wal/batch=1/writers=%d", writers), func(b *testing.B) {
			appends := make([]func(i int) error, writers)
			for w := range appends {
				f, err := os.Create(filepath.Join(b.TempDir(), "wal"))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { f.Close() })
				// etcd preallocates its segments, so an append changes no size.
				if err := f.Truncate(int64(b.N+1) * int64(len(data))); err != nil {
					b.Fatal(err)
				}
				appends[w] = func(i int) error {
					if _, err := f.WriteAt(data, int64(i)*int64(len(data))); err != nil {
						return err
					}
					return syscall.Fdatasync(int(f.Fd()))
				}
			}
			runWriters(b, appends)
		})
	}
}

// runWriters runs b.N appends on every writer at once.
func runWriters(b *testing.B, appends []func(i int) error) {
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, appendOne := range appends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range b.N {
				if err := appendOne(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestChooseLogStore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string // in the data dir
		asked string
		want  string
		err   string
	}{
		{name: "new dir, none asked", want: DefaultLogStore},
		{name: "new dir, boltdb asked", asked: LogStoreBoltDB, want: LogStoreBoltDB},
		{name: "new dir, wal asked", asked: LogStoreWAL, want: LogStoreWAL},
		{name: "snapshot only (restored), wal asked", files: []string{"snapshots/"}, asked: LogStoreWAL, want: LogStoreWAL},
		{name: "bolt dir, none asked", files: []string{boltFile}, want: LogStoreBoltDB},
		{name: "wal dir, none asked", files: []string{walDir + "/"}, want: LogStoreWAL},
		{name: "bolt dir, boltdb asked", files: []string{boltFile}, asked: LogStoreBoltDB, want: LogStoreBoltDB},
		{name: "bolt dir, wal asked", files: []string{boltFile}, asked: LogStoreWAL,
			err: "holds a boltdb log store but --log-store wal was given: start with --log-store boltdb"},
		{name: "wal dir, boltdb asked", files: []string{walDir + "/"}, asked: LogStoreBoltDB,
			err: "holds a wal log store but --log-store boltdb was given: start with --log-store wal"},
		{name: "both", files: []string{boltFile, walDir + "/"}, err: "holds both"},
		{name: "unknown", asked: "rocksdb", err: `unknown log store "rocksdb"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				var err error
				if d, ok := strings.CutSuffix(f, "/"); ok {
					err = os.Mkdir(filepath.Join(dir, d), 0o700)
				} else {
					err = os.WriteFile(filepath.Join(dir, f), nil, 0o600)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			got, err := chooseLogStore(dir, tc.asked)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("chooseLogStore(%v, %q) = %q, %v; want error %q", tc.files, tc.asked, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("chooseLogStore(%v, %q) = %q, %v; want %q", tc.files, tc.asked, got, err, tc.want)
			}
		})
	}
}

// TestWALEntryChecksum stores entries, changes one byte of an early one in
// the segment file, and opens the store again: raft-wal alone would read
// the changed entry back (it checks only the newest batch's CRC when it
// opens); checkedCodec's per-entry checksum refuses it.
func TestWALEntryChecksum(t *testing.T) {
	dir := t.TempDir()
	s, err := openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := s.StoreLogs([]*raft.Log{{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "value-%02d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(data, []byte("value-03"))
	if at < 0 {
		t.Fatal("value-03 not in the segment")
	}
	data[at+len("value-0")] = '4'
	if err := os.WriteFile(segs[0], data, 0o600); err != nil {
		t.Fatal(err)
	}

	_, err = openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
	var corrupt *CorruptLogError
	if !errors.As(err, &corrupt) || !errors.Is(err, errEntryChecksum) || !strings.Contains(err.Error(), "entry 4 of 1..20") {
		t.Fatalf("open after a changed byte: %v", err)
	}
}

// TestWALHeaderDamage: a segment header that no longer matches raft-wal's
// meta database is raft-wal's own ErrCorrupt, reported as a CorruptLogError
// like a failed entry checksum.
func TestWALHeaderDamage(t *testing.T) {
	dir := t.TempDir()
	s, err := openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	// Two appends: the header is covered by the first batch's CRC, and a
	// damaged last batch would be taken for a torn write and dropped.
	for i := range 2 {
		if err := s.StoreLogs([]*raft.Log{{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	f, err := os.OpenFile(segs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Bytes 8-15 of the segment header are its base index.
	if _, err := f.WriteAt([]byte{0xfe}, 8); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
	var corrupt *CorruptLogError
	if !errors.As(err, &corrupt) || !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), "BaseIndex") {
		t.Fatalf("open after a damaged segment header: %v", err)
	}
}

// TestWALRefusesSecondOpener: raft-wal's meta database would wait for the
// first opener forever; the store's own lock answers at once.
func TestWALRefusesSecondOpener(t *testing.T) {
	dir := t.TempDir()
	s, err := openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := openLogStore(dir, LogStoreWAL, hclog.NewNullLogger()); !errors.Is(err, errStoreLocked) {
		t.Fatalf("second open: %v, want %v", err, errStoreLocked)
	}
}

// TestLogStoreSize: corenode_kv_db_size_bytes counts the files of whichever
// store the member opened, and only those.
func TestLogStoreSize(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBoltDB} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			s, err := openLogStore(dir, kind, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: make([]byte, 300)}}); err != nil {
				t.Fatal(err)
			}
			var want int64
			err = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					fi, err := d.Info()
					if err != nil {
						return err
					}
					want += fi.Size()
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := logStoreSize(dir, kind); got != want || got <= 0 {
				t.Fatalf("logStoreSize = %d, want the %d bytes in %s", got, want, dir)
			}
			if other := map[string]string{LogStoreWAL: LogStoreBoltDB, LogStoreBoltDB: LogStoreWAL}[kind]; logStoreSize(dir, other) != 0 {
				t.Fatalf("the %s store's size counts in a %s data dir", other, kind)
			}
			if kind == LogStoreWAL && want < walSegmentSize {
				t.Fatalf("wal holds %d bytes, less than one preallocated segment (%d)", want, walSegmentSize)
			}
		})
	}
}

// TestWALShortenedLogRefused changes the type byte of the first frame of
// the newest segment, which makes raft-wal stop reading there and open an
// empty log; the last index recorded beside it refuses that. Truncations
// raft makes, of the end or of the whole log, open as they should.
func TestWALShortenedLogRefused(t *testing.T) {
	store := func(t *testing.T, dir string, from, to int) {
		t.Helper()
		s, err := openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for i := from; i <= to; i++ {
			if err := s.StoreLogs([]*raft.Log{{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	reopen := func(t *testing.T, dir string, deleteFrom, deleteTo uint64) (first, last uint64) {
		t.Helper()
		s, err := openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if deleteTo > 0 {
			if err := s.DeleteRange(deleteFrom, deleteTo); err != nil {
				t.Fatal(err)
			}
		}
		first, _ = s.FirstIndex()
		last, _ = s.LastIndex()
		return first, last
	}

	t.Run("damaged frame header", func(t *testing.T) {
		dir := t.TempDir()
		store(t, dir, 1, 20)
		segs, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
		f, err := os.OpenFile(segs[0], os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The segment header is 32 bytes; the first frame's type follows.
		if _, err := f.WriteAt([]byte{0x7f}, 32); err != nil {
			t.Fatal(err)
		}
		f.Close()
		_, err = openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
		var corrupt *CorruptLogError
		if !errors.As(err, &corrupt) || !errors.Is(err, errLogShortened) || !strings.Contains(err.Error(), "ends at entry 0, but entries up to 20 were written") {
			t.Fatalf("open after a damaged frame header: %v", err)
		}
	})
	t.Run("tail truncated", func(t *testing.T) {
		dir := t.TempDir()
		store(t, dir, 1, 20)
		reopen(t, dir, 15, 20)
		if first, last := reopen(t, dir, 0, 0); first != 1 || last != 14 {
			t.Fatalf("after deleting 15..20: log %d..%d", first, last)
		}
		store(t, dir, 15, 16)
		if _, last := reopen(t, dir, 0, 0); last != 16 {
			t.Fatalf("after appending 15..16 again: last %d", last)
		}
	})
	t.Run("whole log removed", func(t *testing.T) {
		dir := t.TempDir()
		store(t, dir, 1, 20)
		reopen(t, dir, 1, 20) // as raft does after installing a snapshot
		if first, last := reopen(t, dir, 0, 0); last != 0 {
			t.Fatalf("after deleting 1..20: log %d..%d", first, last)
		}
		store(t, dir, 31, 32)
		if first, last := reopen(t, dir, 0, 0); first != 31 || last != 32 {
			t.Fatalf("after appending 31..32: log %d..%d", first, last)
		}
	})
	t.Run("head compacted", func(t *testing.T) {
		dir := t.TempDir()
		store(t, dir, 1, 20)
		reopen(t, dir, 1, 10)
		if _, last := reopen(t, dir, 0, 0); last != 20 {
			t.Fatalf("after deleting 1..10: last %d", last)
		}
	})
}

// TestWALIsMonotonic: raft learns that the wal refuses gaps through every
// wrapper between it and raft, so it clears the log after installing a
// snapshot instead of appending past a gap.
func TestWALIsMonotonic(t *testing.T) {
	s, err := openLogStore(t.TempDir(), LogStoreWAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cache, err := raft.NewLogCache(16, timedLogStore{s, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})})
	if err != nil {
		t.Fatal(err)
	}
	if !isMonotonic(cache) {
		t.Fatal("raft would not see the wal as monotonic")
	}
}

// TestWALFailedOpenReleasesMetaDB: a wal whose meta database holds a state
// raft-wal cannot parse fails to open, and once it is repaired opens again
// in the same process, as the storage probe's retries do (reopenableStore).
// raft-wal alone keeps the meta database's lock after the failed open, and
// the next open waits for it forever.
func TestWALFailedOpenReleasesMetaDB(t *testing.T) {
	dir := writeStore(t, LogStoreWAL, 10)
	path, _ := boltPath(dir, LogStoreWAL)
	pristine, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Every copy of the state's JSON, the live one among them.
	damaged := bytes.ReplaceAll(pristine, []byte(`{"NextSegmentID"`), []byte(`{[NextSegmentID"`))
	if bytes.Equal(damaged, pristine) {
		t.Fatal("no state JSON in the meta database")
	}
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	var corrupt *CorruptLogError
	if _, err := openLogStore(dir, LogStoreWAL, hclog.NewNullLogger()); !errors.As(err, &corrupt) || !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("open with the state damaged: %v, want raft-wal's ErrCorrupt in a CorruptLogError", err)
	}
	if err := os.WriteFile(path, pristine, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		s, err := openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
		if err == nil {
			s.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("open after the repair: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("open after the repair waits on the lock the failed open kept")
	}
}

// TestWALRotationCutShort: a segment sealed on disk whose rotation never
// reached the meta database (a crash, or a meta write that failed on a
// full disk) takes appends again when the log opens, and keeps every entry.
// raft-wal 0.4.2 alone refuses every append to it with "segment is
// sealed", across restarts.
func TestWALRotationCutShort(t *testing.T) {
	dir := writeStore(t, LogStoreWAL, 20)
	wdir := filepath.Join(dir, walDir)

	// Seal the tail as a rotation's last append does, and stop there.
	meta := &metadb.BoltMetaDB{}
	st, err := meta.Load(wdir)
	if err != nil {
		t.Fatal(err)
	}
	meta.Close()
	tail := st.Segments[len(st.Segments)-1]
	w, err := segment.NewFiler(wdir, walfs.New()).RecoverTail(tail)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ForceSeal(); err != nil {
		t.Fatal(err)
	}
	w.Close()

	s, err := openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open with the rotation cut short: %v", err)
	}
	for i := uint64(21); i <= 25; i++ {
		if err := s.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}); err != nil {
			t.Fatalf("append %d after the rotation was finished: %v", i, err)
		}
	}
	s.Close()
	s, err = openLogStore(dir, LogStoreWAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 1 || last != 25 {
		t.Fatalf("log %d..%d after the repair, want 1..25", first, last)
	}
	if segs, _ := filepath.Glob(filepath.Join(wdir, "*.wal")); len(segs) != 2 {
		t.Fatalf("%d segment files, want the sealed one and its successor", len(segs))
	}
}

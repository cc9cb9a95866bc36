package logstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
)

// TestWALShortenedLogRefused changes the type byte of the first frame of
// the newest segment, which makes raft-wal stop reading there and open an
// empty log; the last index recorded beside it refuses that. Truncations
// raft makes, of the end or of the whole log, open as they should.
func TestWALShortenedLogRefused(t *testing.T) {
	store := func(t *testing.T, dir string, from, to int) {
		t.Helper()
		s, err := openStore(dir, WAL, hclog.NewNullLogger())
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
		s, err := openStore(dir, WAL, hclog.NewNullLogger())
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
		_, err = openStore(dir, WAL, hclog.NewNullLogger())
		var corrupt *CorruptError
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
// wrapper between it and raft, as a member stacks them (the entry sums,
// Store, Verifier, raft's log cache, Guard), so it clears the log after
// installing a snapshot instead of appending past a gap.
func TestWALIsMonotonic(t *testing.T) {
	s, err := Open(Config{DataDir: t.TempDir(), Kind: WAL, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := s.Verifier(1)
	defer v.Close()
	cache, err := raft.NewLogCache(16, v)
	if err != nil {
		t.Fatal(err)
	}
	if !isMonotonic(s.Health().Guard(cache)) {
		t.Fatal("raft would not see the wal as monotonic")
	}
}

// TestWALFailedOpenReleasesMetaDB: a wal whose meta database holds a state
// raft-wal cannot parse fails to open, and once it is repaired opens again
// in the same process, as the storage probe's retries do (Store.reopen).
// raft-wal alone keeps the meta database's lock after the failed open, and
// the next open waits for it forever.
func TestWALFailedOpenReleasesMetaDB(t *testing.T) {
	dir := writeStore(t, WAL, 10)
	path, _ := boltPath(dir, WAL)
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
	var corrupt *CorruptError
	if _, err := openStore(dir, WAL, hclog.NewNullLogger()); !errors.As(err, &corrupt) || !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("open with the state damaged: %v, want raft-wal's ErrCorrupt in a CorruptError", err)
	}
	if err := os.WriteFile(path, pristine, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		s, err := openStore(dir, WAL, hclog.NewNullLogger())
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
	dir := writeStore(t, WAL, 20)
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

	s, err := openStore(dir, WAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open with the rotation cut short: %v", err)
	}
	for i := uint64(21); i <= 25; i++ {
		if err := s.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}); err != nil {
			t.Fatalf("append %d after the rotation was finished: %v", i, err)
		}
	}
	s.Close()
	s, err = openStore(dir, WAL, hclog.NewNullLogger())
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

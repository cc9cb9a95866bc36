//go:build linux

package logstore

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

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
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
//	go test -run '^$' -bench LogAppend -benchtime 2000x ./logstore/
func BenchmarkLogAppend(b *testing.B) {
	data := make([]byte, 300)
	for _, writers := range []int{1, 3} {
		for _, kind := range []string{BoltDB, WAL} {
			for _, batch := range []int{1, 64} {
				b.Run(fmt.Sprintf("%s/batch=%d/writers=%d", kind, batch, writers), func(b *testing.B) {
					appends := make([]func(i int) error, writers)
					for w := range appends {
						s, err := openStore(b.TempDir(), kind, hclog.NewNullLogger())
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
		{name: "new dir, none asked", want: Default},
		{name: "new dir, boltdb asked", asked: BoltDB, want: BoltDB},
		{name: "new dir, wal asked", asked: WAL, want: WAL},
		{name: "snapshot only (restored), wal asked", files: []string{"snapshots/"}, asked: WAL, want: WAL},
		{name: "bolt dir, none asked", files: []string{boltFile}, want: BoltDB},
		{name: "wal dir, none asked", files: []string{walDir + "/"}, want: WAL},
		{name: "bolt dir, boltdb asked", files: []string{boltFile}, asked: BoltDB, want: BoltDB},
		{name: "bolt dir, wal asked", files: []string{boltFile}, asked: WAL,
			err: "holds a boltdb log store but --log-store wal was given: start with --log-store boltdb"},
		{name: "wal dir, boltdb asked", files: []string{walDir + "/"}, asked: BoltDB,
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
			got, err := choose(dir, tc.asked)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("choose(%v, %q) = %q, %v; want error %q", tc.files, tc.asked, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("choose(%v, %q) = %q, %v; want %q", tc.files, tc.asked, got, err, tc.want)
			}
		})
	}
}

// TestWALEntryChecksum stores entries, changes one byte of an early one in
// the segment file, and opens the store again: raft-wal alone would read
// the changed entry back (it checks only the newest batch's CRC when it
// opens); checkedStore's per-entry checksum refuses it.
func TestWALEntryChecksum(t *testing.T) {
	dir := t.TempDir()
	s, err := openStore(dir, WAL, hclog.NewNullLogger())
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

	_, err = openStore(dir, WAL, hclog.NewNullLogger())
	var corrupt *CorruptError
	if !errors.As(err, &corrupt) || !errors.Is(err, errEntryChecksum) || !strings.Contains(err.Error(), "entry 4 of 1..20") {
		t.Fatalf("open after a changed byte: %v", err)
	}
}

// TestWALHeaderDamage: a segment header that no longer matches raft-wal's
// meta database is raft-wal's own ErrCorrupt, reported as a CorruptError
// like a failed entry checksum.
func TestWALHeaderDamage(t *testing.T) {
	dir := t.TempDir()
	s, err := openStore(dir, WAL, hclog.NewNullLogger())
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
	_, err = openStore(dir, WAL, hclog.NewNullLogger())
	var corrupt *CorruptError
	if !errors.As(err, &corrupt) || !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), "BaseIndex") {
		t.Fatalf("open after a damaged segment header: %v", err)
	}
}

// TestWALRefusesSecondOpener: raft-wal's meta database would wait for the
// first opener forever; the store's own lock answers at once.
func TestWALRefusesSecondOpener(t *testing.T) {
	dir := t.TempDir()
	s, err := openStore(dir, WAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := openStore(dir, WAL, hclog.NewNullLogger()); !errors.Is(err, errStoreLocked) {
		t.Fatalf("second open: %v, want %v", err, errStoreLocked)
	}
}

// TestLogStoreSize: corenode_kv_db_size_bytes counts the files of whichever
// store the member opened, and only those.
func TestLogStoreSize(t *testing.T) {
	for _, kind := range []string{WAL, BoltDB} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			s, err := openStore(dir, kind, hclog.NewNullLogger())
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
			if got := diskSize(dir, kind); got != want || got <= 0 {
				t.Fatalf("size = %d, want the %d bytes in %s", got, want, dir)
			}
			if other := map[string]string{WAL: BoltDB, BoltDB: WAL}[kind]; diskSize(dir, other) != 0 {
				t.Fatalf("the %s store's size counts in a %s data dir", other, kind)
			}
			if kind == WAL && want < walSegmentSize {
				t.Fatalf("wal holds %d bytes, less than one preallocated segment (%d)", want, walSegmentSize)
			}
		})
	}
}

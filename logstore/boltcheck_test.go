package logstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// boltPath is the bolt file of a log store of kind in dir, and its name in
// messages.
func boltPath(dir, kind string) (path, name string) {
	if kind == BoltDB {
		return filepath.Join(dir, boltFile), boltFile
	}
	return filepath.Join(dir, walDir, walMetaFile), walDir + "/" + walMetaFile
}

// TestCheckBoltPassesHealthyStores runs each store through what raft does
// to it (appends of small and page-sized entries, head compaction, tail
// truncation, term and vote writes) and reopens it often: checkBolt must
// pass every file bbolt wrote, or members would refuse healthy data dirs.
func TestCheckBoltPassesHealthyStores(t *testing.T) {
	for _, kind := range []string{BoltDB, WAL} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(1, 2))
			var next uint64 = 1
			for round := range 12 {
				s, err := openStore(dir, kind, hclog.NewNullLogger())
				if err != nil {
					t.Fatalf("round %d: open: %v", round, err)
				}
				for range 40 {
					logs := make([]*raft.Log, 1+rng.IntN(64))
					for i := range logs {
						size := 50 + rng.IntN(400)
						if rng.IntN(20) == 0 {
							size = 3000 + rng.IntN(20000) // spans pages
						}
						logs[i] = &raft.Log{Index: next, Term: uint64(round + 1), Type: raft.LogCommand, Data: make([]byte, size)}
						next++
					}
					if err := s.StoreLogs(logs); err != nil {
						t.Fatal(err)
					}
					if err := s.SetUint64([]byte("CurrentTerm"), uint64(round+1)); err != nil {
						t.Fatal(err)
					}
				}
				first, _ := s.FirstIndex()
				switch round % 3 {
				case 1: // compaction after a snapshot
					if err := s.DeleteRange(first, next-200); err != nil {
						t.Fatal(err)
					}
				case 2: // a new leader's conflicting tail
					if err := s.DeleteRange(next-30, next-1); err != nil {
						t.Fatal(err)
					}
					next -= 30
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				path, name := boltPath(dir, kind)
				if err := checkBolt(path, name); err != nil {
					t.Fatalf("round %d: a healthy %s refused: %v", round, name, err)
				}
			}
		})
	}
}

// writeStore makes a log store of kind in a new dir with entries 1..n and
// a term, closed.
func writeStore(t testing.TB, kind string, n int) string {
	t.Helper()
	dir := t.TempDir()
	s, err := openStore(dir, kind, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 1000 {
		logs := make([]*raft.Log, min(1000, n-i))
		for j := range logs {
			logs[j] = &raft.Log{Index: uint64(i + j + 1), Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "value-%07d-%0280d", i+j, 0)}
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		if err := s.SetUint64([]byte("CurrentTerm"), uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDamagedBoltIsCorruptLog damages each store's bolt file as a disk
// does and opens the store again: a CorruptError that names the file and
// what is wrong with it, where bbolt alone panics (some of it on a
// goroutine of its own, which would kill this test binary) or, for an empty
// file, starts a new log with no term or vote.
func TestDamagedBoltIsCorruptLog(t *testing.T) {
	for _, kind := range []string{BoltDB, WAL} {
		for _, tc := range []struct {
			name   string
			damage func(data []byte, pageSize int) []byte
			cause  string
		}{
			{"flipped", func(data []byte, pageSize int) []byte {
				// Every 7th byte past the meta pages: the meta database is a
				// few pages, any of which may hold its root.
				for i := 2 * pageSize; i < len(data); i += 7 {
					data[i] ^= 0x5a
				}
				return data
			}, ""},
			{"half", func(data []byte, _ int) []byte { return data[:len(data)/2] }, "truncated"},
			{"empty", func([]byte, int) []byte { return nil }, "empty (0 bytes)"},
			{"meta-pages", func(data []byte, pageSize int) []byte {
				data[16] ^= 0xff             // meta 0's magic
				data[pageSize+16+50] ^= 0xff // meta 1's txid, under its checksum
				return data
			}, "both meta pages are damaged"},
		} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				dir := writeStore(t, kind, 2000)
				path, name := boltPath(dir, kind)
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, tc.damage(data, os.Getpagesize()), 0o600); err != nil {
					t.Fatal(err)
				}
				s, err := openStore(dir, kind, hclog.NewNullLogger())
				if err == nil {
					s.Close()
					t.Fatalf("%s opened after damage to %s", kind, name)
				}
				var corrupt *CorruptError
				if !errors.As(err, &corrupt) || !errors.Is(err, errBoltDamaged) ||
					!strings.Contains(corrupt.Err.Error(), name+": "+tc.cause) {
					t.Fatalf("open after damage to %s: %v; want a CorruptError saying %q", name, err, name+": "+tc.cause)
				}
				t.Logf("%v", corrupt.Err)
			})
		}
	}
}

// TestOneDamagedMetaPageOpens: bbolt keeps two meta pages and falls back
// to the other one's (older) transaction when the newer is damaged, as a
// write torn by a crash leaves it; the check picks the same one and does
// not refuse the file.
func TestOneDamagedMetaPageOpens(t *testing.T) {
	for _, kind := range []string{BoltDB, WAL} {
		t.Run(kind, func(t *testing.T) {
			dir := writeStore(t, kind, 200)
			path, _ := boltPath(dir, kind)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			// The meta with the higher txid (bytes 48..55 of the meta,
			// after the 16-byte page header) is the newer.
			var txid [2][8]byte
			for i := range txid {
				if _, err := f.ReadAt(txid[i][:], int64(i*os.Getpagesize()+16+48)); err != nil {
					t.Fatal(err)
				}
			}
			newer := 0
			if boltEndian.Uint64(txid[1][:]) > boltEndian.Uint64(txid[0][:]) {
				newer = 1
			}
			if _, err := f.WriteAt([]byte{0xee}, int64(newer*os.Getpagesize()+16+20)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			s, err := openStore(dir, kind, hclog.NewNullLogger())
			if err != nil {
				t.Fatalf("open with meta page %d damaged: %v", newer, err)
			}
			s.Close()
		})
	}
}

// TestBoltRefusesSecondOpener: a second member on a running member's
// raft.db is refused at once, before the check reads a file being written.
func TestBoltRefusesSecondOpener(t *testing.T) {
	dir := t.TempDir()
	s, err := openStore(dir, BoltDB, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	if _, err := openStore(dir, BoltDB, hclog.NewNullLogger()); !errors.Is(err, errStoreLocked) {
		t.Fatalf("second open: %v, want %v", err, errStoreLocked)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the second open took %v to be refused", d)
	}
}

// BenchmarkCheckBolt is what checkBolt adds to a member's start on a
// raft.db of 100,000 entries of a put's size (about 300 bytes), beside
// what opening the store costs with it (open-and-verify: checkBolt, bbolt's
// open, which walks every page to rebuild the freelist, and verifyLog's
// read of every entry).
//
//	go test -run '^$' -bench CheckBolt -benchtime 20x ./logstore/
func BenchmarkCheckBolt(b *testing.B) {
	dir := writeStore(b, BoltDB, 100_000)
	path, name := boltPath(dir, BoltDB)
	if fi, err := os.Stat(path); err == nil {
		b.Logf("raft.db: %d MiB", fi.Size()>>20)
	}
	b.Run("check", func(b *testing.B) {
		for range b.N {
			if err := checkBolt(path, name); err != nil {
				b.Fatal(err)
			}
		}
	})
	// For scale: bbolt's own consistency check, which cannot be used to
	// protect the open (see checkBolt).
	b.Run("bbolt-tx-check", func(b *testing.B) {
		for range b.N {
			db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			err = db.View(func(tx *bbolt.Tx) error {
				for err := range tx.Check() {
					return err
				}
				return nil
			})
			db.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("open-and-verify", func(b *testing.B) {
		for range b.N {
			s, err := openStore(dir, BoltDB, hclog.NewNullLogger())
			if err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
}

// TestBoltByteFlips changes one random byte of each store's bolt file at a
// time, hundreds of times, on a fresh copy of the store each time: either
// the check refuses the file, or the store opens, reads every entry back
// and takes an append and a truncation, without a panic, which would end
// this test binary, and without a hang.
func TestBoltByteFlips(t *testing.T) {
	for _, kind := range []string{BoltDB, WAL} {
		t.Run(kind, func(t *testing.T) {
			dir := writeStore(t, kind, 300)
			path, name := boltPath(dir, kind)
			saved := saveDir(t, dir)
			pristine, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			refused, opened := 0, 0
			for range 400 {
				restoreDir(t, dir, saved)
				data := append([]byte(nil), pristine...)
				// Half of the changes anywhere, half in the first bytes of a
				// page, where its header and elements are: most of a small
				// file is free space.
				at := rng.IntN(len(data))
				if rng.IntN(2) == 0 {
					at = at/os.Getpagesize()*os.Getpagesize() + rng.IntN(256)
				}
				data[at] ^= byte(1 + rng.IntN(255))
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
				s, err := openStore(dir, kind, hclog.NewNullLogger())
				if err != nil {
					if errors.Is(err, errBoltDamaged) {
						refused++
					}
					continue
				}
				opened++
				last, _ := s.LastIndex()
				if err := s.StoreLogs([]*raft.Log{{Index: last + 1, Term: 2, Type: raft.LogCommand, Data: make([]byte, 5000)}}); err != nil {
					t.Errorf("byte %d of %s changed, the check passed it, an append failed: %v", at, name, err)
				}
				if err := s.DeleteRange(last-20, last+1); err != nil {
					t.Errorf("byte %d of %s changed, the check passed it, a truncation failed: %v", at, name, err)
				}
				if err := s.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			}
			t.Logf("%d changes refused by the check, %d opened", refused, opened)
			if refused < 10 || opened < 10 {
				t.Errorf("%d of the changes refused, %d opened: the changes did not reach both kinds of bytes", refused, opened)
			}
		})
	}
}

// savedFile is a file's bytes up to its last non-zero one, and its size (a
// wal segment is mostly preallocated zeros).
type savedFile struct {
	data []byte
	size int64
}

// saveDir saves every file under dir.
func saveDir(t *testing.T, dir string) map[string]savedFile {
	t.Helper()
	saved := map[string]savedFile{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		saved[path] = savedFile{bytes.TrimRight(data, "\x00"), int64(len(data))}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return saved
}

// restoreDir puts dir back as saveDir saw it.
func restoreDir(t *testing.T, dir string, saved map[string]savedFile) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if _, ok := saved[path]; err == nil && d.Type().IsRegular() && !ok {
			return os.Remove(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, f := range saved {
		if err := os.WriteFile(path, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, f.size); err != nil {
			t.Fatal(err)
		}
	}
}

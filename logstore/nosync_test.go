package logstore

import (
	"reflect"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

// countingFS is raft-wal's file system with the fsyncs of its files
// counted.
type countingFS struct {
	types.VFS
	syncs *atomic.Int64
}

func (fs countingFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := fs.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return countingFile{f, fs.syncs}, nil
}

func (fs countingFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := fs.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return countingFile{f, fs.syncs}, nil
}

type countingFile struct {
	types.WritableFile
	syncs *atomic.Int64
}

func (f countingFile) Sync() error {
	f.syncs.Add(1)
	return f.WritableFile.Sync()
}

// field reads the unexported field name of the struct p points to.
func field[T any](t *testing.T, p any, name string) T {
	t.Helper()
	f := reflect.ValueOf(p).Elem().FieldByName(name)
	if !f.IsValid() || f.Type() != reflect.TypeFor[T]() {
		t.Fatalf("%T has no field %s of type %v", p, name, reflect.TypeFor[T]())
	}
	return *(*T)(unsafe.Pointer(f.UnsafeAddr()))
}

// TestNoSyncWAL: a wal store opened with NoSync (--unsafe-no-fsync) appends
// without one fsync of its segment files, and its meta database (raft's
// term and vote) does not sync either; opened without, every append
// syncs.
func TestNoSyncWAL(t *testing.T) {
	var syncs atomic.Int64
	defer func(old func() types.VFS) { walFS = old }(walFS)
	walFS = func() types.VFS { return countingFS{walfs.New(), &syncs} }
	for _, noSync := range []bool{false, true} {
		syncs.Store(0)
		s, err := Open(Config{DataDir: t.TempDir(), Kind: WAL, NoSync: noSync})
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= 10; i++ {
			if err := s.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SetUint64([]byte("CurrentTerm"), 2); err != nil {
			t.Fatal(err)
		}
		w := s.disk.(checkedStore).backend.(walStore).WAL
		meta := field[types.MetaStore](t, w, "metaDB").(*metadb.BoltMetaDB)
		metaNoSync := field[*bbolt.DB](t, meta, "db").NoSync
		s.Close()
		switch n := syncs.Load(); {
		case noSync && (n != 0 || !metaNoSync):
			t.Errorf("with NoSync: %d fsyncs of segment files for 10 appends, meta database NoSync %v; want none, true", n, metaNoSync)
		case !noSync && (n < 10 || metaNoSync):
			t.Errorf("without NoSync: %d fsyncs of segment files for 10 appends, meta database NoSync %v; want 10 or more, false", n, metaNoSync)
		}
	}
}

// TestNoSyncBolt: a boltdb store opened with NoSync commits without fsync.
func TestNoSyncBolt(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		s, err := Open(Config{DataDir: t.TempDir(), Kind: BoltDB, NoSync: noSync})
		if err != nil {
			t.Fatal(err)
		}
		got := field[*bbolt.DB](t, s.disk.(*raftboltdb.BoltStore), "conn").NoSync
		s.Close()
		if got != noSync {
			t.Errorf("opened with NoSync %v: bolt's NoSync is %v", noSync, got)
		}
	}
}

package logstore

import (
	"os"
	"path/filepath"
	"testing"
)

// countingFile is a segment file that counts its full syncs.
type countingFile struct {
	*os.File
	fsyncs int
}

func (c *countingFile) Sync() error { c.fsyncs++; return c.File.Sync() }

func TestDataSyncFileFsyncsOnlyFirst(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "seg"))
	if err != nil {
		t.Fatal(err)
	}
	inner := &countingFile{File: f}
	ds, err := newDataSyncFile(inner, "seg")
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	for i := 0; i < 3; i++ {
		if _, err := ds.WriteAt([]byte("entry"), int64(i*5)); err != nil {
			t.Fatal(err)
		}
		if err := ds.Sync(); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if inner.fsyncs != 1 {
		t.Fatalf("full fsyncs = %d, want 1 (the first; later ones are fdatasync)", inner.fsyncs)
	}
}

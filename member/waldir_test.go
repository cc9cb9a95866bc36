package member

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogDir(t *testing.T) {
	dir := t.TempDir()
	data, wal := filepath.Join(dir, "data"), filepath.Join(dir, "wal")
	if got, err := logDir(data, ""); err != nil || got != data {
		t.Fatalf("no --wal-dir: %q, %v", got, err)
	}
	if got, err := logDir(data, wal); err != nil || got != wal {
		t.Fatalf("first start with --wal-dir: %q, %v", got, err)
	}
	if got, err := logDir(data, wal); err != nil || got != wal {
		t.Fatalf("restart with --wal-dir: %q, %v", got, err)
	}
	for _, w := range []string{"", filepath.Join(dir, "elsewhere")} {
		if _, err := logDir(data, w); err == nil || !strings.Contains(err.Error(), wal) {
			t.Errorf("restart with --wal-dir %q: %v", w, err)
		}
	}
	// A data dir that holds its log refuses a --wal-dir.
	other := filepath.Join(dir, "other")
	if err := os.MkdirAll(filepath.Join(other, "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := logDir(other, wal); err == nil {
		t.Error("--wal-dir on a data dir holding its log: no error")
	}
}

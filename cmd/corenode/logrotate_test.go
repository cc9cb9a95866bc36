package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "etcd.log")
	cfg, err := parseRotation(`{"maxsize": 1, "maxbackups": 2, "compress": true}`)
	if err != nil {
		t.Fatal(err)
	}
	l, closeLog, err := newLogger("zap", "json", "info", []string{path}, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	// About 4 MB of lines: four rotations, two backups kept, gzipped.
	pad := strings.Repeat("x", 1000)
	for range 4000 {
		l.Info("line", "pad", pad)
	}
	closeLog()
	st, err := os.Stat(path)
	if err != nil || st.Size() > 1<<20 {
		t.Fatalf("current file: %v %v", st, err)
	}
	backups := mustGlob(t, filepath.Join(dir, "etcd-*.log.gz"))
	if len(backups) < 1 || len(backups) > 3 || len(mustGlob(t, filepath.Join(dir, "etcd-*.log"))) > 1 {
		t.Errorf("files: %v", mustGlob(t, filepath.Join(dir, "*")))
	}
	if _, _, err := newLogger("zap", "json", "info", []string{"stderr"}, &cfg); err == nil {
		t.Error("rotation of stderr accepted")
	}
	if _, err := parseRotation(`{"maxsize": "big"}`); err == nil {
		t.Error("a bad rotation config accepted")
	}
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

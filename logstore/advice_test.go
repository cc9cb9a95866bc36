package logstore

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft-wal/verifier"
)

// TestAdviceNamesWALDir: what an operator is told to delete is the data
// dir, and, when the raft log lives in a --wal-dir, that dir's contents
// too; the damaged log is named where it is.
func TestAdviceNamesWALDir(t *testing.T) {
	if got, want := WhatToDelete("/d", ""), "the data dir /d"; got != want {
		t.Errorf("no --wal-dir: %q, want %q", got, want)
	}
	if got, want := WhatToDelete("/d", "/d/"), "the data dir /d"; got != want {
		t.Errorf("--wal-dir the data dir: %q, want %q", got, want)
	}
	both := "the data dir /d and the contents of the wal dir /w (--wal-dir)"
	if got := WhatToDelete("/d", "/w"); got != both {
		t.Errorf("--wal-dir /w: %q, want %q", got, both)
	}
	msg := (&CorruptError{DataDir: "/d", LogDir: "/w", Store: WAL, ID: 0xab, Err: errEntryChecksum}).Error()
	for _, want := range []string{"the raft log (wal) in /w is damaged", "etcdctl member remove ab", "delete " + both} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}

	// A log the leader's verification finds different says the same.
	dir := t.TempDir()
	data, logDir := filepath.Join(dir, "data"), filepath.Join(dir, "wal")
	var out bytes.Buffer
	s, err := Open(Config{DataDir: data, LogDir: logDir, Kind: WAL, Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.verified(0xab, verifier.VerificationReport{Err: verifier.ErrChecksumMismatch("sums differ")})
	if want := "delete the data dir " + data + " and the contents of the wal dir " + logDir; !strings.Contains(out.String(), want) {
		t.Errorf("verification mismatch logged %q, want it to say %q", out.String(), want)
	}
}

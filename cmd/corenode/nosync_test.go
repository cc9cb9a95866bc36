package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestUnsafeNoFsyncWarns starts a member with --unsafe-no-fsync: it reaches
// the member's raft log store (which logs this line as it opens it without
// fsync; logstore's TestNoSyncWAL counts the fsyncs), and the member says
// once, as a warning, that this is unsafe and loses data.
func TestUnsafeNoFsyncWarns(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "log")
	oneMember(t, prometheus.NewRegistry(), "--unsafe-no-fsync", "--log-outputs="+logFile)
	out, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	var warned []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "--unsafe-no-fsync") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], `"level":"warn"`) || !strings.Contains(warned[0], "unsafe, will cause data loss") {
		t.Fatalf("lines naming --unsafe-no-fsync: %q, want one warning that it is unsafe and loses data", warned)
	}
}

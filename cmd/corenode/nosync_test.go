package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/internal/freeport"
)

// TestUnsafeNoFsyncWarns starts a member with --unsafe-no-fsync: it reaches
// the member's raft log store (which logs this line as it opens it without
// fsync; logstore's TestNoSyncWAL counts the fsyncs), and the member says
// once, as a warning, that this is unsafe and loses data.
func TestUnsafeNoFsyncWarns(t *testing.T) {
	dir := t.TempDir()
	ports, err := freeport.Ports("127.0.0.1", 2)
	if err != nil {
		t.Fatal(err)
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	logFile := filepath.Join(dir, "log")
	s, err := parseFlags([]string{"--name=u", "--data-dir=" + filepath.Join(dir, "data"), "--unsafe-no-fsync",
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer, "--log-outputs=" + logFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _, closeLog, err := start(s, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog()
	defer m.Close()
	select {
	case <-m.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("not ready after 20 s")
	}
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

package node

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/internal/testenv"
)

// smallFS mounts a tmpfs of size bytes for the test, so a write can fail
// for a full disk for real. It needs root; without it the test skips,
// except in CI, where it fails.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("cannot mount a %s tmpfs (it needs root, as CI runs): %v: %s", size, err, out))
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

func snapshotDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestSnapshotOnFullDiskLeavesNothingBehind: a snapshot that fills the disk
// is cancelled without leaving its partial files, a later one that fits
// succeeds, and a temporary directory left by a crash is removed on open.
func TestSnapshotOnFullDiskLeavesNothingBehind(t *testing.T) {
	dir := smallFS(t, "1m")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := openSnapshots(dir, 2, log)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	create := func(index uint64) raft.SnapshotSink {
		sink, err := s.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, trans)
		if err != nil {
			t.Fatal(err)
		}
		return sink
	}

	sink := create(10)
	if _, err := io.Copy(sink, bytes.NewReader(make([]byte, 2<<20))); err == nil {
		t.Fatal("wrote 2 MiB to a 1 MiB file system")
	}
	sink.Cancel() // as raft does when Persist fails
	if names := snapshotDirs(t, dir); len(names) != 0 {
		t.Fatalf("a failed snapshot left %v behind", names)
	}

	sink = create(11)
	if _, err := sink.Write(make([]byte, 256<<10)); err != nil {
		t.Fatalf("a snapshot that fits after the failed one: %v", err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if metas, err := s.List(); err != nil || len(metas) != 1 || metas[0].Index != 11 {
		t.Fatalf("snapshots after the retry: %v %v", metas, err)
	}

	// A crash in the middle of a snapshot leaves a .tmp directory.
	if err := os.Mkdir(filepath.Join(dir, "snapshots", "1-12-999.tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := openSnapshots(dir, 2, log); err != nil {
		t.Fatal(err)
	}
	for _, name := range snapshotDirs(t, dir) {
		if filepath.Ext(name) == ".tmp" {
			t.Fatalf("open left %s", name)
		}
	}
}

// TestSnapshotKeepsCatchUpEntries: a snapshot truncates the log to
// SnapshotCatchUpEntries behind its end, not to the snapshot interval.
func TestSnapshotKeepsCatchUpEntries(t *testing.T) {
	nodes := startInmem(t, 1, noCheckpoints, func(cfg *Config) {
		cfg.SnapshotCount, cfg.SnapshotCatchUpEntries = 20, 5
	})
	n := nodes[waitLeader(t, nodes)]
	for i := range 40 {
		put(t, n, fmt.Sprintf("k%d", i))
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	first, err := n.logs.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := n.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if kept := last - first + 1; kept != 5 {
		t.Fatalf("the log holds %d..%d after a snapshot: %d entries, want 5", first, last, kept)
	}
}

// TestMaxSnapshotsKept: a member keeps its newest MaxSnapshots snapshots,
// every one with a negative count, and a member started with a lower count
// removes the oldest at start.
func TestMaxSnapshotsKept(t *testing.T) {
	for _, c := range []struct{ max, want int }{{0, DefaultMaxSnapshots}, {3, 3}, {1, 1}, {-1, 7}} {
		t.Run(fmt.Sprint(c.max), func(t *testing.T) {
			cl := newInmemCluster(t, 1, noCheckpoints, func(cfg *Config) { cfg.MaxSnapshots = c.max })
			n := cl.nodes[waitLeader(t, cl.nodes)]
			for i := range 7 {
				put(t, n, fmt.Sprintf("k%d", i)) // raft snapshots only past its last one
				if err := n.raft.Snapshot().Error(); err != nil {
					t.Fatal(err)
				}
			}
			if got := snapshotDirs(t, cl.cfgs[0].DataDir); len(got) != c.want {
				t.Fatalf("7 snapshots taken with MaxSnapshots %d: %d kept (%v), want %d", c.max, len(got), got, c.want)
			}
			if c.max >= 0 && c.max < 2 {
				return
			}
			cl.cfgs[0].MaxSnapshots = 2
			cl.restart(0)
			if got := snapshotDirs(t, cl.cfgs[0].DataDir); len(got) != 2 {
				t.Fatalf("restarted with MaxSnapshots 2: %d kept (%v)", len(got), got)
			}
		})
	}
}

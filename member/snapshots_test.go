package member_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// TestSnapshotCatchUpEntriesReachRaft: the member's
// SnapshotCatchUpEntries (--snapshot-catchup-entries) is the number of
// entries raft keeps behind a snapshot.
func TestSnapshotCatchUpEntriesReachRaft(t *testing.T) {
	c := membertest.New(t, 1, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.SnapshotCatchUpEntries = 7 }))
	if got := c.Members[0].Node().Raft().ReloadableConfig().TrailingLogs; got != 7 {
		t.Fatalf("raft keeps %d entries behind a snapshot, want 7", got)
	}
}

// TestMaxSnapshotsReachTheStore: the member's MaxSnapshots
// (--max-snapshots) is how many snapshots its data dir keeps.
func TestMaxSnapshotsReachTheStore(t *testing.T) {
	c := membertest.New(t, 1, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.MaxSnapshots = 1 }))
	cli := c.Client(0)
	for i := range 3 {
		if _, err := cli.Put(t.Context(), "k", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		if err := c.Members[0].Node().Raft().Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	metas, err := filepath.Glob(filepath.Join(c.Config(0).DataDir, "snapshots", "*", "meta.json"))
	if err != nil || len(metas) != 1 {
		t.Fatalf("3 snapshots taken with MaxSnapshots 1: kept %v (%v), want one", metas, err)
	}
}

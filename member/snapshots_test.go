package member_test

import (
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

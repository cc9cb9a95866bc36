package member_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// TestWALDir keeps the raft log in --wal-dir, apart from the data dir.
func TestWALDir(t *testing.T) {
	walDir := filepath.Join(t.TempDir(), "wal")
	var dataDir string
	c := membertest.New(t, 1, membertest.WithConfig(func(_ int, cfg *member.Config) {
		cfg.WALDir = walDir
		dataDir = cfg.DataDir
	}))
	c.WaitLeader()
	if _, err := os.Stat(filepath.Join(walDir, "wal")); err != nil {
		t.Errorf("no raft log in --wal-dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "wal")); err == nil {
		t.Error("a raft log in the data dir too")
	}
}

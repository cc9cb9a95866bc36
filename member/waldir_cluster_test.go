package member_test

import (
	"os"
	"path/filepath"
	"strings"
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

// TestWALDirDamageAdvice: a member whose raft log in --wal-dir is damaged
// refuses to start with advice that names where the log is, and that both
// the data dir and the wal dir must be emptied: deleting the data dir
// alone would leave the damaged log for the next start with --wal-dir.
func TestWALDirDamageAdvice(t *testing.T) {
	walDir := filepath.Join(t.TempDir(), "wal")
	c := membertest.New(t, 1, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.WALDir = walDir }))
	c.WaitLeader()
	c.Stop(0)
	dataDir := c.Config(0).DataDir
	if err := os.WriteFile(filepath.Join(walDir, "wal", "wal-meta.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := startOn(t, c, 0, nil)
	if err == nil {
		m.Close()
		t.Fatal("member started on an emptied wal-meta.db")
	}
	assertRefusedDamaged(t, err, "wal-meta.db: empty", dataDir)
	for _, want := range []string{"in " + walDir + " is damaged",
		"delete the data dir " + dataDir + " and the contents of the wal dir " + walDir + " (--wal-dir)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

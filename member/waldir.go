package member

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// walDirMarker, in a data dir whose raft log lives elsewhere (etcd's
// --wal-dir), names where. Without it, a member restarted without
// --wal-dir (or with another) would start on an empty log beside its
// snapshots and take itself for a new member.
const walDirMarker = "wal-dir"

// logDir is where the member's raft log lives: walDir when given, else
// the data dir; checked against what the data dir holds.
func logDir(dataDir, walDir string) (string, error) {
	recorded, err := os.ReadFile(filepath.Join(dataDir, walDirMarker))
	switch {
	case err == nil:
		rec := strings.TrimSpace(string(recorded))
		if walDir == "" {
			return "", fmt.Errorf("the raft log of data dir %s is in %s: start with --wal-dir %s", dataDir, rec, rec)
		}
		if abs, _ := filepath.Abs(walDir); abs != rec {
			return "", fmt.Errorf("the raft log of data dir %s is in %s, not --wal-dir %s", dataDir, rec, walDir)
		}
		return walDir, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("data dir: %w", err)
	}
	if walDir == "" {
		return dataDir, nil
	}
	for _, f := range []string{"wal", "raft.db"} {
		if _, err := os.Stat(filepath.Join(dataDir, f)); err == nil {
			return "", fmt.Errorf("data dir %s holds its raft log (%s); --wal-dir %s would start an empty one", dataDir, f, walDir)
		}
	}
	abs, err := filepath.Abs(walDir)
	if err != nil {
		return "", fmt.Errorf("--wal-dir: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, walDirMarker), []byte(abs+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	return walDir, nil
}

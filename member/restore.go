package member

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/node"
)

// RestoreConfig names a snapshot file and the new cluster member it seeds,
// with the flags `etcdutl snapshot restore` takes.
type RestoreConfig struct {
	SnapshotFile             string
	Name                     string
	DataDir                  string
	InitialCluster           string
	InitialClusterToken      string
	InitialAdvertisePeerURLs []string
	// LogStore is the raft log store to create (node.LogStoreWAL or
	// node.LogStoreBoltDB; empty for node.DefaultLogStore): the member
	// started on the data dir keeps it.
	LogStore string
	Logger   *slog.Logger
}

// Restore builds one member's data directory of a new cluster from a file
// written by `etcdctl snapshot save`. Run it once per member, with the same
// file and --initial-cluster, then start every member as for a new cluster:
// they find existing state, skip bootstrap, and serve every key, revision and
// lease of the snapshot under a new cluster ID. Lease deadlines restart from
// the remaining TTLs the snapshot holds.
func Restore(cfg RestoreConfig) (fsm.SnapshotStats, error) {
	var stats fsm.SnapshotStats
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.InitialClusterToken == "" {
		cfg.InitialClusterToken = "corenode-cluster"
	}
	if entries, err := os.ReadDir(cfg.DataDir); err == nil && len(entries) > 0 {
		return stats, fmt.Errorf("data dir %s is not empty; restore only into a new directory", cfg.DataDir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return stats, fmt.Errorf("data dir: %w", err)
	}
	servers, err := initialServers(cfg.Name, cfg.InitialCluster, cfg.InitialClusterToken, cfg.InitialAdvertisePeerURLs)
	if err != nil {
		return stats, err
	}
	body, err := verifiedSnapshot(cfg.SnapshotFile)
	if err != nil {
		return stats, err
	}
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = string(s.ID)
	}
	var state bytes.Buffer
	if stats, err = fsm.Reseed(body, &state, fsm.ClusterIDOf(ids), node.RestoredIndex, cfg.Logger); err != nil {
		return stats, fmt.Errorf("snapshot %s: %w", cfg.SnapshotFile, err)
	}
	if err := node.InitLogStore(cfg.DataDir, cfg.LogStore); err != nil {
		return stats, err
	}
	if err := node.WriteRestoredSnapshot(cfg.DataDir, servers, &state); err != nil {
		return stats, err
	}
	return stats, nil
}

// verifiedSnapshot returns the snapshot body after checking the SHA-256 the
// server appended, so a truncated download fails here rather than as a
// half-restored cluster.
func verifiedSnapshot(path string) (io.Reader, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	if len(data) < sha256.Size {
		return nil, fmt.Errorf("snapshot %s: %d bytes is too short to be a snapshot", path, len(data))
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, fmt.Errorf("snapshot %s: checksum mismatch: the file is damaged or truncated", path)
	}
	return bytes.NewReader(body), nil
}

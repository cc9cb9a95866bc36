package member

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/corenode/corenode/etcddb"
	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/logstore"
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
	// LogStore is the raft log store to create (logstore.WAL or
	// logstore.BoltDB; empty for logstore.Default): the member
	// started on the data dir keeps it.
	LogStore string
	// SkipHashCheck restores a file with no SHA-256 at its end, such as an
	// etcd member's member/snap/db, as `etcdutl snapshot restore
	// --skip-hash-check` does: unchecked, so a damaged file may restore
	// damaged state, or stop bbolt partway.
	SkipHashCheck bool
	Logger        *slog.Logger
}

// RestoreStats describes what Restore restored.
type RestoreStats struct {
	fsm.SnapshotStats
	// Format names the file's format: "etcd" (etcd's backend file, what
	// etcd's Snapshot RPC streams and corenode's does too) or "corenode"
	// (the format corenode's Snapshot RPC streamed before it wrote etcd's).
	Format string
	// StorageVersion is the storage schema an etcd file declares, from
	// etcd 3.6 on.
	StorageVersion string
}

// Restore builds one member's data directory of a new cluster from a file
// written by `etcdctl snapshot save`, from an etcd member (3.4 to 3.7) or a
// corenode one. Run it once per member, with the same file and
// --initial-cluster, then start every member as for a new cluster: they
// find existing state, skip bootstrap, and serve every key, revision and
// lease of the snapshot, and its users and roles, under a new cluster ID.
// Leases restart with the remaining TTL the snapshot recorded if it holds
// one (a checkpoint), else their whole TTL, as etcd's do.
func Restore(cfg RestoreConfig) (stats RestoreStats, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.InitialClusterToken == "" {
		cfg.InitialClusterToken = "corenode-cluster"
	}
	entries, err := os.ReadDir(cfg.DataDir)
	existed := err == nil
	if existed && len(entries) > 0 {
		return stats, fmt.Errorf("data dir %s is not empty; restore only into a new directory", cfg.DataDir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return stats, fmt.Errorf("data dir: %w", err)
	}
	servers, err := initialServers(cfg.Name, cfg.InitialCluster, cfg.InitialClusterToken, cfg.InitialAdvertisePeerURLs)
	if err != nil {
		return stats, err
	}
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = string(s.ID)
	}
	c, stats, err := readBackup(cfg.SnapshotFile, cfg.SkipHashCheck, cfg.Logger)
	if err != nil {
		return stats, fmt.Errorf("snapshot %s: %w", cfg.SnapshotFile, err)
	}

	// The file is sound: from here on a failure (a full disk) leaves the
	// data dir as it was found.
	defer func() {
		if err == nil {
			return
		}
		if !existed {
			os.RemoveAll(cfg.DataDir)
			return
		}
		entries, _ := os.ReadDir(cfg.DataDir)
		for _, e := range entries {
			os.RemoveAll(filepath.Join(cfg.DataDir, e.Name()))
		}
	}()
	if err := logstore.Init(cfg.DataDir, cfg.LogStore); err != nil {
		return stats, err
	}
	// The state is encoded as it is stored, not first in memory.
	pr, pw := io.Pipe()
	type seeded struct {
		st  fsm.SnapshotStats
		err error
	}
	done := make(chan seeded, 1)
	go func() {
		st, err := fsm.Seed(c, pw, fsm.ClusterIDOf(ids), node.RestoredIndex)
		pw.CloseWithError(err)
		done <- seeded{st, err}
	}()
	err = node.WriteRestoredSnapshot(cfg.DataDir, servers, pr)
	pr.CloseWithError(err) // a failed write stops the encoding
	res := <-done
	stats.SnapshotStats = res.st
	if res.err != nil {
		return stats, fmt.Errorf("snapshot %s: %w", cfg.SnapshotFile, res.err)
	}
	return stats, err
}

// readBackup checks the snapshot file at path and reads the state it
// holds, in either format.
func readBackup(path string, skipHashCheck bool, logger *slog.Logger) (fsm.Contents, RestoreStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return fsm.Contents{}, RestoreStats{}, fmt.Errorf("read snapshot: %w", err)
	}
	defer f.Close()
	size, err := checkSum(f, skipHashCheck)
	if err != nil {
		return fsm.Contents{}, RestoreStats{}, err
	}
	head := make([]byte, 64)
	n, _ := f.ReadAt(head, 0)
	if !etcddb.IsBackend(head[:n]) {
		c, err := fsm.ReadSnapshot(io.NewSectionReader(f, 0, size), logger)
		return c, RestoreStats{Format: "corenode"}, err
	}
	c, info, err := etcddb.Read(path)
	return c, RestoreStats{Format: "etcd", StorageVersion: info.StorageVersion}, err
}

// checkSum checks the SHA-256 that the Snapshot RPC appends (etcd's and
// corenode's alike) against the rest of the file, so that a truncated
// download or a damaged file fails here rather than as a half-restored
// cluster, and returns the length of what it covers. With skip it checks
// nothing, and the hash is there if the file's length says so (etcd's
// rule: a snapshot is a multiple of 512 bytes, and the hash).
func checkSum(f *os.File, skip bool) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("read snapshot: %w", err)
	}
	hashed := fi.Size()%512 == sha256.Size
	if skip {
		if hashed {
			return fi.Size() - sha256.Size, nil
		}
		return fi.Size(), nil
	}
	size := fi.Size() - sha256.Size
	if size <= 0 {
		return 0, fmt.Errorf("%d bytes is too short to be a snapshot", fi.Size())
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size)); err != nil {
		return 0, fmt.Errorf("read snapshot: %w", err)
	}
	sum := make([]byte, sha256.Size)
	if _, err := f.ReadAt(sum, size); err != nil {
		return 0, fmt.Errorf("read snapshot: %w", err)
	}
	if !bytes.Equal(h.Sum(nil), sum) {
		if fi.Size()%512 == 0 {
			return 0, errors.New("no SHA-256 at the end of the file: not what etcdctl snapshot save writes (an etcd member's db file?); --skip-hash-check restores it unchecked")
		}
		return 0, errors.New("checksum mismatch: the file is damaged or truncated (its SHA-256 does not match the one appended when it was saved)")
	}
	return size, nil
}

package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/etcddb"
)

// snapshotStore is hashicorp/raft's FileSnapshotStore with the cleanup it
// misses. When a snapshot cannot be written (a full disk), its sink's
// Cancel and Close return at the first failed flush (raft 1.7.3,
// FileSnapshotSink.finalize), before they close the state file and remove
// the temporary directory, so every failed attempt keeps a partial
// state.bin, open and on disk, and the space freed for the next attempt is
// eaten again. Here a sink that is cancelled, or whose Close fails, always
// closes its state file and removes its directory.
type snapshotStore struct {
	*raft.FileSnapshotStore
	dir string // the store's snapshots directory
	log *slog.Logger
}

// openSnapshots opens the snapshot store under dataDir, keeping the newest
// retain snapshots, first removing the temporary directories a crash or a
// failed write left there: raft never reads them (it skips names ending in
// .tmp), so they are only lost space. Snapshots beyond retain go at once
// (raft reaps only after it takes one), so a lower --max-snapshots frees
// the space when the member starts, as etcd's purge does soon after.
func openSnapshots(dataDir string, retain int, log *slog.Logger) (*snapshotStore, error) {
	dir := filepath.Join(dataDir, "snapshots")
	if err := removeTempSnapshots(dir, log); err != nil {
		return nil, err
	}
	fs, err := raft.NewFileSnapshotStoreWithLogger(dataDir, retain, hclog.NewNullLogger())
	if err != nil {
		return nil, err
	}
	if err := fs.ReapSnapshots(); err != nil {
		return nil, fmt.Errorf("remove snapshots beyond the newest %d: %w", retain, err)
	}
	return &snapshotStore{FileSnapshotStore: fs, dir: dir, log: log}, nil
}

// snapshotsRetained is the retain count of raft's snapshot store for
// Config.MaxSnapshots: raft has no "keep all", so a negative count (etcd's
// --max-snapshots 0) is the largest int, which its reaping never reaches.
func snapshotsRetained(maxSnapshots int) int {
	if maxSnapshots < 0 {
		return math.MaxInt
	}
	return maxSnapshots
}

// checkSnapshotCoversLog refuses a log that was truncated behind a
// snapshot the store no longer holds (a deleted or emptied snapshots
// directory): raft would start on it and panic ("log not found") when it
// reads the missing entries, where the member must instead be re-added.
func checkSnapshotCoversLog(logs raft.LogStore, snaps raft.SnapshotStore) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("first index: %w", err)
	}
	if first <= 1 {
		return nil // nothing truncated: the log alone rebuilds the state
	}
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	if len(metas) > 0 && metas[0].Index+1 >= first {
		return nil // List puts the newest first
	}
	return fmt.Errorf("%w: the log starts at entry %d, and no snapshot holds the entries before it (was the snapshots directory deleted?)",
		errSnapshotMissing, first)
}

// errSnapshotMissing marks a log whose earlier entries live only in a
// snapshot that is gone.
var errSnapshotMissing = errors.New("snapshot missing")

// removeTempSnapshots deletes dir's temporary snapshot directories.
func removeTempSnapshots(dir string, log *slog.Logger) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("node: read snapshot dir: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("node: remove unfinished snapshot %s: %w", e.Name(), err)
		}
		log.Warn("removed an unfinished snapshot (a crash or a full disk interrupted it)", "dir", e.Name())
	}
	return nil
}

// Create implements raft.SnapshotStore.
func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &cleanSink{SnapshotSink: sink, tmp: filepath.Join(s.dir, sink.ID()+".tmp"), log: s.log}, nil
}

// cleanSink removes its temporary directory whenever the snapshot does not
// complete. Its methods are called from one goroutine, as raft's are.
type cleanSink struct {
	raft.SnapshotSink
	tmp string
	log *slog.Logger
}

func (c *cleanSink) Close() error {
	err := c.SnapshotSink.Close()
	if err != nil {
		c.remove()
	}
	return err
}

func (c *cleanSink) Cancel() error {
	err := c.SnapshotSink.Cancel()
	c.remove()
	return err
}

func (c *cleanSink) remove() {
	closeStateFile(c.SnapshotSink)
	if err := os.RemoveAll(c.tmp); err != nil {
		c.log.Warn("could not remove an unfinished snapshot", "dir", c.tmp, "err", err)
	}
}

// closeStateFile closes the state file of a raft.FileSnapshotSink whose
// finalize failed and left it open: removing the file alone would not give
// its space back while it is open. The field is unexported, so it is
// reached by reflection; TestSnapshotOnFullDiskLeavesNothingBehind fails
// if a raft upgrade renames or retypes it. A second Close of a file
// finalize did close only returns an error, ignored.
func closeStateFile(sink raft.SnapshotSink) {
	v := reflect.ValueOf(sink)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return
	}
	f := v.Elem().FieldByName("stateFile")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*os.File]() {
		return
	}
	if file := *(**os.File)(unsafe.Pointer(f.UnsafeAddr())); file != nil {
		_ = file.Close()
	}
}

// ExportSnapshot writes the state machine's state, as of the last applied
// entry, as an etcd backend file (what etcd's Snapshot RPC streams), in the
// data dir rather than a temporary directory that may live in memory, and
// returns it open; the caller closes it. The capture is cheap and holds up
// no apply; the writing takes a few seconds per million keys and stops
// with ctx.
func (n *Node) ExportSnapshot(ctx context.Context) (*etcddb.File, error) {
	f, err := etcddb.Export(ctx, n.cfg.DataDir, n.fsm.Contents(), n.raft.CurrentTerm())
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return f, nil
}

// WriteRestoredSnapshot seeds an empty data directory with state as its
// first raft snapshot, with servers as the configuration: the member started
// on it finds existing state and skips bootstrap, so every member of a
// cluster restored from the same file starts from identical state.
func WriteRestoredSnapshot(dataDir string, servers []raft.Server, state io.Reader) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("node: data dir: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dataDir, 2, hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("node: open snapshot store: %w", err)
	}
	// The transport only encodes the legacy peer list inside the snapshot
	// metadata; its address form is the same as the network transport's.
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, RestoredIndex, 1, raft.Configuration{Servers: servers}, RestoredIndex, trans)
	if err != nil {
		return fmt.Errorf("node: create snapshot: %w", err)
	}
	if _, err := io.Copy(sink, state); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("node: write snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("node: write snapshot: %w", err)
	}
	return nil
}

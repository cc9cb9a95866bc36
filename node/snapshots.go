package node

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
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

// openSnapshots opens the snapshot store under dataDir, first removing the
// temporary directories a crash or a failed write left there: raft never
// reads them (it skips names ending in .tmp), so they are only lost space.
func openSnapshots(dataDir string, retain int, log *slog.Logger) (*snapshotStore, error) {
	dir := filepath.Join(dataDir, "snapshots")
	if err := removeTempSnapshots(dir, log); err != nil {
		return nil, err
	}
	fs, err := raft.NewFileSnapshotStoreWithLogger(dataDir, retain, hclog.NewNullLogger())
	if err != nil {
		return nil, err
	}
	return &snapshotStore{FileSnapshotStore: fs, dir: dir, log: log}, nil
}

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

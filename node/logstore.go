package node

import (
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"
)

// openLog opens the raft log and stable store in dir.
//
// Not syncing bolt's freelist, as etcd does not, saves a page write per
// append (about 30% of append time measured here); the cost is a scan to
// rebuild the freelist when the file opens. An append is still a bolt
// commit: its pages, an fdatasync, the meta page, another fdatasync
// (BenchmarkLogAppend).
func openLog(dir string) (*raftboltdb.BoltStore, error) {
	return raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: 5 * time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}})
}

// timedLogStore records how long every append to the log takes
// (corenode_disk_fsync_seconds): bolt commits each batch with its
// fdatasyncs, so this is the disk latency every write waits for.
type timedLogStore struct {
	raft.LogStore
	h prometheus.Histogram
}

func (s timedLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s timedLogStore) StoreLogs(ls []*raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLogs(ls)
	s.h.Observe(time.Since(start).Seconds())
	return err
}

package node

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/fsm"
)

// Forcing a new cluster (etcd's --force-new-cluster): a member whose
// cluster lost its quorum for good restarts, with its data, as a
// one-member cluster, and grows back with member add. hashicorp/raft's
// RecoverCluster does the raft part: it applies the local log after the
// latest snapshot to a scratch FSM, snapshots that with a configuration of
// this member alone, and empties the log; raft then starts on the snapshot
// and, the only voter, elects itself. The member keeps its ID, and the
// cluster its ID.
//
// Every entry in the log is applied, also entries the old cluster never
// committed: writes it never acknowledged may appear, as with etcd, which
// replays its whole WAL the same way. Once the others' logs are gone nobody
// can tell which of them were committed; keeping them loses no write that
// was acknowledged.

// ErrNoStateToRecover refuses --force-new-cluster on a data dir with no
// raft state: there is nothing to keep, and starting anyway would make a
// new, empty cluster that a user who mistyped --data-dir takes for the old.
var ErrNoStateToRecover = errors.New("node: --force-new-cluster needs this member's data, and its data dir holds no raft log or snapshot")

// ForcedNewCluster reports whether this start forced a new one-member
// cluster from the member's data (Config.ForceNewCluster).
func (n *Node) ForcedNewCluster() bool { return n.forcedNewCluster }

// recovery is what forceNewCluster did, for its log line.
type recovery struct {
	snapshotIndex uint64 // the snapshot the log was applied to (0: none)
	replayed      int    // entries applied after it
	lastIndex     uint64 // the index of the state now
	dropped       []uint64
	alarms        []string // alarms of dropped members, cleared
	selfWasIn     bool     // the last configuration had this member
}

// forceNewCluster rewrites the member's raft state into a one-member
// cluster of itself, keeping everything its log and snapshot hold.
func (n *Node) forceNewCluster(rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore,
	trans raft.Transport) (recovery, error) {
	last, err := logs.LastIndex()
	if err != nil {
		return recovery{}, fmt.Errorf("node: --force-new-cluster: read the log: %w", err)
	}
	metas, err := snaps.List()
	if err != nil {
		return recovery{}, fmt.Errorf("node: --force-new-cluster: list snapshots: %w", err)
	}
	if last == 0 && len(metas) == 0 {
		return recovery{}, fmt.Errorf("%w (%s)", ErrNoStateToRecover, n.cfg.DataDir)
	}
	prev, err := lastConfiguration(metas, logs)
	if err != nil {
		return recovery{}, fmt.Errorf("node: --force-new-cluster: %w", err)
	}
	self := ServerID(n.cfg.ID)
	var res recovery
	// The address the others knew this member by, where they find it
	// again; a member forced from data in which it was no longer a member
	// (it had been removed) takes its transport's.
	addr := trans.LocalAddr()
	for _, s := range prev.Servers {
		if s.ID == self {
			addr, res.selfWasIn = s.Address, true
			continue
		}
		if id, err := ParseServerID(s.ID); err == nil {
			res.dropped = append(res.dropped, id)
		}
	}
	opened := &openedSnapshots{SnapshotStore: snaps}
	r := &replay{FSM: fsm.New(n.log, nil, nil), logs: logs, last: last, opened: opened, res: &res,
		keep: func(id uint64) bool { return id == n.cfg.ID }}
	if err := raft.RecoverCluster(rc, r, logs, stable, opened, trans,
		raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: self, Address: addr}}}); err != nil {
		return recovery{}, fmt.Errorf("node: --force-new-cluster: %w", err)
	}
	if r.err != nil {
		return recovery{}, fmt.Errorf("node: --force-new-cluster: %w", r.err)
	}
	res.lastIndex = max(last, res.snapshotIndex)
	return res, nil
}

// lastConfiguration is the latest configuration the member knows: the
// newest snapshot's, or a later one in the log.
func lastConfiguration(metas []*raft.SnapshotMeta, logs raft.LogStore) (raft.Configuration, error) {
	var conf raft.Configuration
	var from uint64
	if len(metas) > 0 {
		conf, from = metas[0].Configuration, metas[0].Index+1
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return conf, fmt.Errorf("read the log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return conf, fmt.Errorf("read the log: %w", err)
	}
	for i := max(from, first, 1); i <= last; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return conf, fmt.Errorf("read entry %d: %w", i, err)
		}
		if l.Type == raft.LogConfiguration {
			conf = raft.DecodeConfiguration(l.Data)
		}
	}
	return conf, nil
}

// openedSnapshots remembers the snapshot RecoverCluster opened last, so
// the replay knows which index the FSM restored.
type openedSnapshots struct {
	raft.SnapshotStore
	meta *raft.SnapshotMeta
}

func (o *openedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := o.SnapshotStore.Open(id)
	if err == nil {
		o.meta = meta
	}
	return meta, rc, err
}

// replay is the scratch FSM RecoverCluster applies the log to. It hands
// the FSM every entry raft would, in order: RecoverCluster passes commands
// only, and the FSM also takes configurations (the first one names the
// cluster ID) and the index of every other entry. Before the snapshot it
// forgets the members the new cluster drops.
type replay struct {
	*fsm.FSM
	logs   raft.LogStore
	last   uint64 // the log's last index
	opened *openedSnapshots
	next   uint64 // the next index to apply
	keep   func(id uint64) bool
	res    *recovery
	err    error // the first failure, which RecoverCluster cannot hear
}

func (r *replay) Restore(rc io.ReadCloser) error {
	if err := r.FSM.Restore(rc); err != nil {
		return err
	}
	if r.opened.meta != nil {
		r.res.snapshotIndex = r.opened.meta.Index
		r.next = r.opened.meta.Index + 1
	}
	return nil
}

func (r *replay) Apply(l *raft.Log) any {
	r.through(l.Index - 1)
	r.next = l.Index + 1
	r.res.replayed++
	return r.FSM.Apply(l)
}

// through applies the entries before index that RecoverCluster skipped.
func (r *replay) through(index uint64) {
	if r.next == 0 {
		r.next = 1
	}
	var batch []*raft.Log
	for i := r.next; i <= index; i++ {
		l := new(raft.Log)
		if err := r.logs.GetLog(i, l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue // before the log's start: the snapshot holds it
			}
			r.err = errors.Join(r.err, fmt.Errorf("read entry %d: %w", i, err))
			return
		}
		batch = append(batch, l)
		r.res.replayed++
	}
	if len(batch) > 0 {
		r.FSM.ApplyBatch(batch)
	}
	r.next = max(r.next, index+1)
}

func (r *replay) Snapshot() (raft.FSMSnapshot, error) {
	r.through(r.last)
	if r.err != nil {
		return nil, r.err
	}
	for _, a := range r.FSM.ForgetMembers(r.keep) {
		r.res.alarms = append(r.res.alarms, fmt.Sprintf("%x:%s", a.MemberID, a.Alarm))
	}
	return r.FSM.Snapshot()
}

// hexIDs are member IDs as etcdctl shows them, sorted.
func hexIDs(ids []uint64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprintf("%x", id)
	}
	slices.Sort(out)
	return out
}

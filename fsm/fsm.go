// Package fsm is corenode's raft.FSM: it decodes committed commands and
// applies them to the kv (and, later, lease) state in one deterministic step,
// and it snapshots and restores that state.
//
// Concurrency contract (hashicorp/raft's): Apply, ApplyBatch, Snapshot and
// Restore are called from raft's single FSM goroutine, never concurrently
// with each other. FSMSnapshot.Persist runs on another goroutine concurrently
// with later applies, so Snapshot captures an immutable view. Readers
// (Member, ClusterID, Lease, Leases, Store) may be called from any goroutine.
package fsm

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lease"
)

// Result is what ApplyBatch returns for each command entry; the proposer
// receives it from the raft.ApplyFuture. Err is an etcd rpctypes error when
// the command was refused at apply (validation happens here, not only before
// proposing, because concurrent proposals race).
type Result struct {
	Resp any
	Err  error
}

// FSM applies corenode commands. Create it with New.
type FSM struct {
	log   *slog.Logger
	store *kv.Store

	// lmu guards the lease table and orders observer calls with
	// PromoteLeases, so a new leader's tracker misses no lease entry.
	lmu      sync.Mutex
	leases   *lease.Table
	observer LeaseObserver

	mu        sync.RWMutex
	clusterID uint64
	members   map[uint64]*pb.Member // published name and client URLs by member ID

	// amu guards applied, the index of the last entry this FSM applied,
	// appliedCh, closed and replaced whenever applied advances, and
	// committingCh, closed and replaced whenever a batch starts to apply.
	amu          sync.Mutex
	applied      uint64
	appliedCh    chan struct{}
	committingCh chan struct{}
}

// Applied is the raft index of the last entry applied to this FSM.
func (f *FSM) Applied() uint64 {
	f.amu.Lock()
	defer f.amu.Unlock()
	return f.applied
}

// WaitApplied returns once the FSM has applied index, or ctx ends. A
// follower serving a linearizable read waits here for the index the leader
// named after confirming its leadership.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		f.amu.Lock()
		if f.applied >= index {
			f.amu.Unlock()
			return nil
		}
		ch := f.appliedCh
		f.amu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Committing returns a channel closed when the FSM next starts to apply
// committed entries: raft's commit index has moved by then. It fires
// before the entries' watchers are notified, so a leader can tell
// followers of the commit while it fans events out itself.
func (f *FSM) Committing() <-chan struct{} {
	f.amu.Lock()
	defer f.amu.Unlock()
	return f.committingCh
}

func (f *FSM) setApplied(index uint64) {
	f.amu.Lock()
	if index > f.applied {
		f.applied = index
		close(f.appliedCh)
		f.appliedCh = make(chan struct{})
	}
	f.amu.Unlock()
}

// LeaseObserver hears lease grants and removals as they apply, on the
// apply goroutine with the lease table locked: it must not block or call
// back into the FSM. The leader's tracker uses it to start and drop
// deadlines; on other members it ignores the calls.
type LeaseObserver interface {
	Granted(id, ttl int64)
	Removed(id int64)
}

type nopObserver struct{}

func (nopObserver) Granted(int64, int64) {}
func (nopObserver) Removed(int64)        {}

// New returns an FSM over an empty store. observer may be nil.
func New(logger *slog.Logger, observer LeaseObserver) *FSM {
	if logger == nil {
		logger = slog.Default()
	}
	if observer == nil {
		observer = nopObserver{}
	}
	f := &FSM{
		log:          logger,
		leases:       lease.NewTable(),
		observer:     observer,
		members:      map[uint64]*pb.Member{},
		appliedCh:    make(chan struct{}),
		committingCh: make(chan struct{}),
	}
	// Called with the store's write lock held, from this FSM's apply, where
	// lmu is already held by applyCommand: reading the table is safe.
	f.store = kv.NewStore(kv.Options{LeaseExists: func(id int64) bool { return f.leases.Exists(id) }})
	return f
}

// PromoteLeases calls fn with the lease clock and every lease while no
// lease entry can apply; the new leader's tracker starts inside fn.
func (f *FSM) PromoteLeases(fn func(clock int64, leases []lease.Lease)) {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	fn(f.leases.Clock(), f.leases.Leases())
}

// Lease returns lease id's replicated facts.
func (f *FSM) Lease(id int64) (lease.Lease, bool) {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	return f.leases.Lookup(id)
}

// Leases returns every live lease, ordered by ID.
func (f *FSM) Leases() []lease.Lease {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	return f.leases.Leases()
}

// LeaseCount is the number of live leases.
func (f *FSM) LeaseCount() int {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	return f.leases.Len()
}

// Store is the kv state; use it for reads and watches only. Writes go through Raft.
func (f *FSM) Store() *kv.Store { return f.store }

// ClusterID is derived from the cluster's first configuration entry, so every
// member computes the same value without coordination. Zero until applied.
func (f *FSM) ClusterID() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.clusterID
}

// Member returns what member id published about itself, or nil.
func (f *FSM) Member(id uint64) *pb.Member {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if m, ok := f.members[id]; ok {
		c := *m
		return &c
	}
	return nil
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	f.amu.Lock()
	close(f.committingCh)
	f.committingCh = make(chan struct{})
	f.amu.Unlock()
	out := make([]any, len(logs))
	for i, l := range logs {
		switch l.Type {
		case raft.LogCommand:
			out[i] = f.applyCommand(l)
		case raft.LogConfiguration:
			f.applyConfiguration(l)
		}
	}
	if len(logs) > 0 {
		f.setApplied(logs[len(logs)-1].Index)
	}
	return out
}

func (f *FSM) applyCommand(l *raft.Log) Result {
	cmd, err := Decode(l.Data)
	if err != nil {
		// Skipping an entry that other members may have applied would fork
		// the state; stopping is the only safe answer. It means a newer
		// corenode wrote the log: upgrade this member.
		panic(fmt.Sprintf("fsm: cannot apply entry %d: %v", l.Index, err))
	}
	// Every command takes the lease lock: Put and Txn check lease existence
	// at apply, and lease commands change the table and the keys together.
	f.lmu.Lock()
	defer f.lmu.Unlock()
	switch cmd.Op {
	case OpPut:
		resp, err := f.store.Put(cmd.Msg.(*pb.PutRequest))
		return Result{Resp: resp, Err: err}
	case OpDeleteRange:
		resp, err := f.store.DeleteRange(cmd.Msg.(*pb.DeleteRangeRequest))
		return Result{Resp: resp, Err: err}
	case OpTxn:
		resp, err := f.store.Txn(cmd.Msg.(*pb.TxnRequest))
		return Result{Resp: resp, Err: err}
	case OpCompact:
		resp, err := f.store.Compact(cmd.Msg.(*pb.CompactionRequest).Revision)
		return Result{Resp: resp, Err: err}
	case OpPublish:
		m := cmd.Msg.(*pb.Member)
		f.mu.Lock()
		f.members[m.ID] = m
		f.mu.Unlock()
		return Result{Resp: m}
	case OpLeaseGrant:
		r := cmd.Msg.(*pb.LeaseGrantRequest)
		if err := f.leases.Grant(r.ID, r.TTL); err != nil {
			return Result{Err: err}
		}
		f.observer.Granted(r.ID, r.TTL)
		return Result{Resp: &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: f.store.Rev()}, ID: r.ID, TTL: r.TTL}}
	case OpLeaseRevoke:
		id := cmd.Msg.(*pb.LeaseRevokeRequest).ID
		if !f.leases.Exists(id) {
			return Result{Err: rpctypes.ErrGRPCLeaseNotFound}
		}
		return Result{Resp: &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: f.revoke(id)}}}
	case OpLeaseExpire:
		// Each lease goes in its own revision, as a revoke does; one already
		// revoked meanwhile is skipped.
		for _, id := range cmd.Msg.(*lease.Expire).IDs {
			if f.leases.Exists(id) {
				f.revoke(id)
			}
		}
		return Result{Resp: f.store.Rev()}
	case OpLeaseCheckpoint:
		f.leases.Apply(cmd.Msg.(*lease.Checkpoint))
		return Result{}
	}
	panic(fmt.Sprintf("fsm: entry %d: op %s decoded but not applied", l.Index, cmd.Op))
}

// revoke removes a lease and deletes its keys in one revision.
func (f *FSM) revoke(id int64) int64 {
	_ = f.leases.Revoke(id)
	rev := f.store.DeleteKeys(f.store.LeaseKeys(id))
	f.observer.Removed(id)
	return rev
}

func (f *FSM) applyConfiguration(l *raft.Log) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clusterID != 0 {
		return
	}
	cfg := raft.DecodeConfiguration(l.Data)
	ids := make([]string, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		ids = append(ids, string(s.ID))
	}
	f.clusterID = ClusterIDOf(ids)
}

// ClusterIDOf derives a cluster ID from the member IDs of its first
// configuration, independent of their order.
func ClusterIDOf(serverIDs []string) uint64 {
	ids := slices.Clone(serverIDs)
	slices.Sort(ids)
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

// Snapshot format, version 2 (version 1 lacks the applied index):
//
//	magic "corenode-fsm\n", version byte (2)
//	uvarint applied index (the raft index the state is as of)
//	uvarint cluster ID
//	uvarint length + pb.MemberListResponse (published members, by ID order)
//	uvarint lease clock, uvarint lease count, then per lease varint ID, TTL, Expiry
//	the kv snapshot (the lease-to-keys index is rebuilt from it, never stored)
const snapshotMagic = "corenode-fsm\n"
const (
	snapshotV1 byte = 1
	snapshotV2 byte = 2
)

type snapshot struct {
	applied    uint64
	clusterID  uint64
	members    []*pb.Member
	leaseClock int64
	leases     []lease.Lease
	kv         *kv.Snapshot
}

// Snapshot implements raft.FSM. It copies only pointers to immutable data;
// the encoding happens in Persist, off the apply goroutine.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	s := &snapshot{clusterID: f.clusterID, applied: f.Applied()}
	for _, m := range f.members {
		s.members = append(s.members, m)
	}
	f.mu.RUnlock()
	slices.SortFunc(s.members, func(a, b *pb.Member) int { return cmp.Compare(a.ID, b.ID) })
	f.lmu.Lock()
	s.leaseClock, s.leases = f.leases.Clock(), f.leases.Leases()
	f.lmu.Unlock()
	s.kv = f.store.Snapshot()
	return s, nil
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.WriteString(snapshotMagic)
	bw.WriteByte(snapshotV2)
	bw.Write(binary.AppendUvarint(nil, s.applied))
	bw.Write(binary.AppendUvarint(nil, s.clusterID))
	ml, err := (&pb.MemberListResponse{Members: s.members}).Marshal()
	if err != nil {
		return err
	}
	bw.Write(binary.AppendUvarint(nil, uint64(len(ml))))
	bw.Write(ml)
	bw.Write(binary.AppendUvarint(nil, uint64(s.leaseClock)))
	bw.Write(binary.AppendUvarint(nil, uint64(len(s.leases))))
	var buf []byte
	for _, l := range s.leases {
		buf = binary.AppendVarint(buf[:0], l.ID)
		buf = binary.AppendVarint(buf, l.TTL)
		buf = binary.AppendVarint(buf, l.Expiry)
		bw.Write(buf)
	}
	if _, err := s.kv.WriteTo(bw); err != nil {
		return err
	}
	return bw.Flush()
}

func (s *snapshot) Release() {}

// Restore implements raft.FSM: it replaces all state with the snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 1<<20)
	magic := make([]byte, len(snapshotMagic)+1)
	if _, err := io.ReadFull(br, magic); err != nil {
		return fmt.Errorf("fsm: restore: read header: %w", err)
	}
	if string(magic[:len(snapshotMagic)]) != snapshotMagic {
		return errors.New("fsm: restore: not a corenode snapshot")
	}
	var applied uint64
	switch v := magic[len(snapshotMagic)]; v {
	case snapshotV1:
	case snapshotV2:
		var err error
		if applied, err = binary.ReadUvarint(br); err != nil {
			return fmt.Errorf("fsm: restore: applied index: %w", err)
		}
	default:
		return fmt.Errorf("fsm: restore: %w: snapshot version %d", ErrUnknownFormat, v)
	}
	clusterID, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("fsm: restore: cluster id: %w", err)
	}
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("fsm: restore: members length: %w", err)
	}
	if n > 64<<20 {
		return fmt.Errorf("fsm: restore: members section of %d bytes is corrupt", n)
	}
	ml := make([]byte, n)
	if _, err := io.ReadFull(br, ml); err != nil {
		return fmt.Errorf("fsm: restore: members: %w", err)
	}
	var list pb.MemberListResponse
	if err := list.Unmarshal(ml); err != nil {
		return fmt.Errorf("fsm: restore: members: %w", err)
	}
	leaseClock, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("fsm: restore: lease clock: %w", err)
	}
	count, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("fsm: restore: lease count: %w", err)
	}
	var leases []lease.Lease
	for i := uint64(0); i < count; i++ {
		var l lease.Lease
		for _, p := range []*int64{&l.ID, &l.TTL, &l.Expiry} {
			if *p, err = binary.ReadVarint(br); err != nil {
				return fmt.Errorf("fsm: restore: lease %d of %d: %w", i, count, err)
			}
		}
		leases = append(leases, l)
	}
	f.lmu.Lock()
	defer f.lmu.Unlock()
	if err := f.store.Restore(br); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	f.leases.Restore(int64(leaseClock), leases)
	members := make(map[uint64]*pb.Member, len(list.Members))
	for _, m := range list.Members {
		members[m.ID] = m
	}
	f.mu.Lock()
	f.clusterID = clusterID
	f.members = members
	f.mu.Unlock()
	// A restore may move the index back (a reseeded snapshot starts a new
	// log at 1), so it is set, not advanced.
	f.amu.Lock()
	f.applied = applied
	close(f.appliedCh)
	f.appliedCh = make(chan struct{})
	f.amu.Unlock()
	f.log.Info("restored state from snapshot", "revision", f.store.Rev(), "members", len(members), "leases", len(leases))
	return nil
}

// SnapshotStats describes a snapshot's contents.
type SnapshotStats struct {
	Revision int64
	Keys     int
	Leases   int
}

// Reseed reads a snapshot from src, checking it decodes completely, and
// writes it to dst as the first state of a new cluster: as of raft index
// index of the new log, with clusterID and without the old cluster's
// published members, which the new members publish afresh. Keys, revisions
// and leases are kept.
func Reseed(src io.Reader, dst io.Writer, clusterID, index uint64, logger *slog.Logger) (SnapshotStats, error) {
	f := New(logger, nil)
	if err := f.Restore(io.NopCloser(src)); err != nil {
		return SnapshotStats{}, err
	}
	f.clusterID = clusterID
	f.members = map[uint64]*pb.Member{}
	f.applied = index
	s, err := f.Snapshot()
	if err != nil {
		return SnapshotStats{}, err
	}
	if err := s.(*snapshot).write(dst); err != nil {
		return SnapshotStats{}, fmt.Errorf("fsm: write reseeded snapshot: %w", err)
	}
	return SnapshotStats{Revision: f.store.Rev(), Keys: f.store.KeyCount(), Leases: f.LeaseCount()}, nil
}

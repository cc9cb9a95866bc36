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
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lease"
)

// Result is what ApplyBatch returns for each command entry; the proposer
// receives it from the raft.ApplyFuture. Err says why the command was
// refused at apply (validation happens here, not only before proposing,
// because concurrent proposals race): a sentinel of fsm, kv, lease or auth,
// which transport's error table turns into etcd's gRPC error.
type Result struct {
	Resp any
	Err  error
}

// FSM applies corenode commands. Create it with New.
type FSM struct {
	log   *slog.Logger
	store *kv.Store
	auth  *auth.Store

	// lmu guards the lease table and orders observer calls with
	// PromoteLeases, so a new leader's tracker misses no lease entry.
	lmu      sync.Mutex
	leases   *lease.Table
	observer LeaseObserver

	mu        sync.RWMutex
	clusterID uint64
	members   map[uint64]*pb.Member // published name and client URLs by member ID
	// alarms holds the raised alarms, ordered by member ID then type so
	// snapshots and answers are deterministic. The slice is replaced, never
	// changed in place, so the read path checks it without a lock; writers
	// hold mu.
	alarms atomic.Pointer[[]*pb.AlarmMember]
	// readLeases is the OpReadLeases record, guarded by mu.
	readLeases ReadLeaseState

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

// AppliedChanged returns a channel closed when the FSM's applied index
// next moves (an applied batch or a restored snapshot).
func (f *FSM) AppliedChanged() <-chan struct{} {
	f.amu.Lock()
	defer f.amu.Unlock()
	return f.appliedCh
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

// New returns an FSM over an empty store. observer may be nil; authStore
// nil means a store with auth.Config's defaults.
func New(logger *slog.Logger, observer LeaseObserver, authStore *auth.Store) *FSM {
	if logger == nil {
		logger = slog.Default()
	}
	if observer == nil {
		observer = nopObserver{}
	}
	if authStore == nil {
		authStore = auth.New(auth.Config{})
	}
	f := &FSM{
		log:          logger,
		auth:         authStore,
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

// LeaseKeys returns the keys attached to lease id, sorted by key bytes.
func (f *FSM) LeaseKeys(id int64) [][]byte { return f.store.LeaseKeys(id) }

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

// Auth returns the auth state.
func (f *FSM) Auth() *auth.Store { return f.auth }

// ClusterID is derived from the cluster's first configuration entry, so every
// member computes the same value without coordination. Zero until applied.
func (f *FSM) ClusterID() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.clusterID
}

// Member returns the cluster's record of member id, or nil: the peer URLs
// and kind it was added with, the name and client URLs it published.
func (f *FSM) Member(id uint64) *pb.Member {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if m, ok := f.members[id]; ok {
		c := *m
		return &c
	}
	return nil
}

// publish records what a member says of itself: its name and client URLs.
// The peer URLs the cluster recorded when it added the member (or changed
// them since) stay, as etcd keeps them apart from the published attributes;
// a member that the cluster has no peer URLs for gives its own.
func (f *FSM) publish(m *pb.Member) *pb.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := &pb.Member{ID: m.ID, Name: m.Name, ClientURLs: m.ClientURLs, PeerURLs: m.PeerURLs}
	if old, ok := f.members[m.ID]; ok {
		rec.IsLearner = old.IsLearner
		if len(old.PeerURLs) > 0 {
			rec.PeerURLs = old.PeerURLs
		}
	}
	f.members[m.ID] = rec
	return rec
}

// recordMember records a member as added, or its new peer URLs (OpMember);
// what it published about itself stays.
func (f *FSM) recordMember(m *pb.Member) *pb.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := &pb.Member{ID: m.ID, PeerURLs: m.PeerURLs, IsLearner: m.IsLearner}
	if old, ok := f.members[m.ID]; ok {
		rec.Name, rec.ClientURLs = old.Name, old.ClientURLs
	}
	f.members[m.ID] = rec
	return rec
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
	if f.capped(cmd) {
		return Result{Err: ErrNoSpace}
	}
	if err := f.authorize(cmd); err != nil {
		return Result{Err: err}
	}
	switch cmd.Op {
	case OpAuth:
		resp, err := f.auth.Apply(cmd.Msg.(*pb.InternalRaftRequest), l.Index)
		return Result{Resp: resp, Err: err}
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
		return Result{Resp: f.publish(cmd.Msg.(*pb.Member))}
	case OpMember:
		return Result{Resp: f.recordMember(cmd.Msg.(*pb.Member))}
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
			return Result{Err: lease.ErrLeaseNotFound}
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
	case OpAlarm:
		return Result{Resp: f.applyAlarm(cmd.Msg.(*pb.AlarmRequest))}
	case OpReadLeases:
		r := cmd.Msg.(*ReadLeases)
		f.mu.Lock()
		st := &f.readLeases
		if r.Grant {
			st.GrantTerm = max(st.GrantTerm, l.Term)
		}
		st.Horizon = max(st.Horizon, r.Horizon)
		st.Cleared = max(st.Cleared, r.Cleared)
		f.mu.Unlock()
		return Result{}
	}
	panic(fmt.Sprintf("fsm: entry %d: op %s decoded but not applied", l.Index, cmd.Op))
}

// authorize is etcd's apply-time permission check of a client's write,
// against the auth state this entry applies to, so every member decides
// alike and a permission revoked while the write was in flight is
// honoured (the write carries the auth revision it was checked at). Only
// what clients write is checked: expiries, checkpoints, alarms and
// member records are the cluster's own.
func (f *FSM) authorize(cmd Command) error {
	if !f.auth.Enabled() {
		return nil
	}
	var ai auth.Info
	if cmd.As != nil {
		ai = auth.Info{User: cmd.As.Username, Revision: cmd.As.AuthRevision}
	}
	switch cmd.Op {
	case OpPut, OpDeleteRange, OpTxn:
		return f.auth.CheckKeys(ai, cmd.Msg, f.store.LeaseKeys)
	case OpLeaseRevoke:
		return f.auth.CheckLeaseKeys(ai, f.store.LeaseKeys(cmd.Msg.(*pb.LeaseRevokeRequest).ID), authpb.WRITE)
	}
	return nil
}

// capped reports whether cmd is refused because the space quota is
// exhausted: while a NOSPACE alarm is raised, as in etcd, nothing that adds
// data applies (Put, a Txn with a put in either branch, LeaseGrant), while
// reads, deletes, compaction and revokes still do, so an operator can make
// room. It reads only replicated state, so every member decides alike.
func (f *FSM) capped(cmd Command) bool {
	return addsData(cmd.Op, cmd.Msg) && f.HasAlarm(0, pb.AlarmType_NOSPACE)
}

// addsData reports whether a command of op with msg is one the space quota
// limits.
func addsData(op Op, msg Message) bool {
	switch op {
	case OpPut, OpLeaseGrant:
		return true
	case OpTxn:
		return txnPuts(msg.(*pb.TxnRequest))
	}
	return false
}

// OverQuota reports whether proposing op with msg would take the store past
// quota bytes (see kv.Store.Size), as etcd checks a request against
// --quota-backend-bytes before it proposes it: the member then raises a
// NOSPACE alarm and refuses the request. A quota of 0 or less is none.
func (f *FSM) OverQuota(op Op, msg Message, quota int64) bool {
	return quota > 0 && addsData(op, msg) && f.store.Size()+int64(msg.Size()) > quota
}

// txnPuts reports whether either branch of r, nested ones included, puts.
func txnPuts(r *pb.TxnRequest) bool {
	for t := range kv.Touches(r) {
		if _, put := t.Req.(*pb.PutRequest); put {
			return true
		}
	}
	return false
}

// applyAlarm raises or clears one alarm and answers the alarms it changed,
// as etcd's alarm store does.
func (f *FSM) applyAlarm(r *pb.AlarmRequest) *pb.AlarmResponse {
	resp := &pb.AlarmResponse{Header: &pb.ResponseHeader{Revision: f.store.Rev()}}
	a := &pb.AlarmMember{MemberID: r.MemberID, Alarm: r.Alarm}
	f.mu.Lock()
	defer f.mu.Unlock()
	alarms := f.Alarms()
	i, found := slices.BinarySearchFunc(alarms, a, compareAlarms)
	switch r.Action {
	case pb.AlarmRequest_ACTIVATE:
		if r.Alarm == pb.AlarmType_NONE {
			break
		}
		if !found {
			alarms = slices.Insert(slices.Clone(alarms), i, a)
			f.alarms.Store(&alarms)
		}
		resp.Alarms = []*pb.AlarmMember{a}
	case pb.AlarmRequest_DEACTIVATE:
		if found {
			alarms = slices.Delete(slices.Clone(alarms), i, i+1)
			f.alarms.Store(&alarms)
			resp.Alarms = []*pb.AlarmMember{a}
		}
	}
	return resp
}

func compareAlarms(a, b *pb.AlarmMember) int {
	if c := cmp.Compare(a.MemberID, b.MemberID); c != 0 {
		return c
	}
	return cmp.Compare(a.Alarm, b.Alarm)
}

// ReadLeaseState is what the log says of read leases (OpReadLeases).
type ReadLeaseState struct {
	// GrantTerm is the last term whose leader may have granted a read
	// lease (0: none ever).
	GrantTerm uint64
	// Horizon is the longest any lease may stay valid after the start of
	// the leadership confirmation it was granted under.
	Horizon time.Duration
	// Cleared is the last granting term whose leases a later leader waited
	// out: when it is GrantTerm, no earlier lease can still be valid.
	Cleared uint64
}

// ReadLeases returns the read-lease record.
func (f *FSM) ReadLeases() ReadLeaseState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.readLeases
}

// Alarms returns the raised alarms, ordered by member ID and type. The
// caller must not modify the slice or its elements.
func (f *FSM) Alarms() []*pb.AlarmMember {
	if p := f.alarms.Load(); p != nil {
		return *p
	}
	return nil
}

// HasAlarm reports whether a member has raised an alarm of type t; member 0
// means any member. It takes no lock, for the request path.
func (f *FSM) HasAlarm(member uint64, t pb.AlarmType) bool {
	for _, a := range f.Alarms() {
		if a.Alarm == t && (member == 0 || a.MemberID == member) {
			return true
		}
	}
	return false
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

// Snapshot format, version 4 (version 3 lacks the read-lease horizon,
// version 2 also the alarms, version 1 also the applied index):
//
//	magic "corenode-fsm\n", version byte (4)
//	uvarint applied index (the raft index the state is as of)
//	uvarint cluster ID
//	uvarint length + pb.MemberListResponse (published members, by ID order)
//	uvarint lease clock, uvarint lease count, then per lease varint ID, TTL, Expiry
//	uvarint alarm count, then per alarm uvarint member ID, uvarint type
//	uvarint read-lease grant term, horizon in nanoseconds, cleared term
//	the kv snapshot (the lease-to-keys index is rebuilt from it, never stored)
const snapshotMagic = "corenode-fsm\n"
const (
	snapshotV1 byte = 1
	snapshotV2 byte = 2
	snapshotV3 byte = 3
	snapshotV4 byte = 4
	// snapshotV5 adds the auth state after the read-lease record.
	snapshotV5 byte = 5
)

type snapshot struct {
	applied    uint64
	clusterID  uint64
	members    []*pb.Member
	leaseClock int64
	leases     []lease.Lease
	alarms     []*pb.AlarmMember
	readLeases ReadLeaseState
	auth       []byte
	authErr    error
	kv         *kv.Snapshot
}

// Snapshot implements raft.FSM. It copies only pointers to immutable data;
// the encoding happens in Persist, off the apply goroutine.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	s := f.capture()
	s.applied = f.Applied()
	return s, nil
}

// capture takes the replicated state between two commands: every command
// applies under lmu.
func (f *FSM) capture() *snapshot {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	f.mu.RLock()
	s := &snapshot{clusterID: f.clusterID}
	for _, m := range f.members {
		s.members = append(s.members, m)
	}
	s.alarms = f.Alarms()
	s.readLeases = f.readLeases
	f.mu.RUnlock()
	s.auth, s.authErr = f.auth.Marshal()
	slices.SortFunc(s.members, func(a, b *pb.Member) int { return cmp.Compare(a.ID, b.ID) })
	s.leaseClock, s.leases = f.leases.Clock(), f.leases.Leases()
	s.kv = f.store.Snapshot()
	return s
}

// Hash checksums the whole replicated state (cluster ID, published
// members, the lease table, every key revision kept) as etcd's Hash
// checksums its whole backend, and returns the revision it was taken at.
// Members agree on it when they have applied the same entries. The raft
// index is left out: it advances per batch, not per command, so it could
// disagree with the state captured between two commands of one batch.
func (f *FSM) Hash() (uint32, int64, error) {
	s := f.capture()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	if err := s.write(h); err != nil {
		return 0, 0, fmt.Errorf("fsm: hash state: %w", err)
	}
	return h.Sum32(), s.kv.Rev(), nil
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
	if s.authErr != nil {
		return fmt.Errorf("fsm: snapshot auth state: %w", s.authErr)
	}
	bw.WriteByte(snapshotV5)
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
	bw.Write(binary.AppendUvarint(nil, uint64(len(s.alarms))))
	for _, a := range s.alarms {
		buf = binary.AppendUvarint(buf[:0], a.MemberID)
		buf = binary.AppendUvarint(buf, uint64(a.Alarm))
		bw.Write(buf)
	}
	buf = binary.AppendUvarint(buf[:0], s.readLeases.GrantTerm)
	buf = binary.AppendUvarint(buf, uint64(s.readLeases.Horizon))
	buf = binary.AppendUvarint(buf, s.readLeases.Cleared)
	bw.Write(buf)
	bw.Write(binary.AppendUvarint(nil, uint64(len(s.auth))))
	bw.Write(s.auth)
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
	version := magic[len(snapshotMagic)]
	switch version {
	case snapshotV1:
	case snapshotV2, snapshotV3, snapshotV4, snapshotV5:
		var err error
		if applied, err = binary.ReadUvarint(br); err != nil {
			return fmt.Errorf("fsm: restore: applied index: %w", err)
		}
	default:
		return fmt.Errorf("fsm: restore: %w: snapshot version %d", ErrUnknownFormat, version)
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
	var alarms []*pb.AlarmMember
	if version >= snapshotV3 {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("fsm: restore: alarm count: %w", err)
		}
		for i := uint64(0); i < n; i++ {
			a := &pb.AlarmMember{}
			var t uint64
			if a.MemberID, err = binary.ReadUvarint(br); err == nil {
				t, err = binary.ReadUvarint(br)
			}
			if err != nil {
				return fmt.Errorf("fsm: restore: alarm %d of %d: %w", i, n, err)
			}
			a.Alarm = pb.AlarmType(t)
			alarms = append(alarms, a)
		}
	}
	var readLeases ReadLeaseState
	if version >= snapshotV4 {
		var v [3]uint64
		for i := range v {
			if v[i], err = binary.ReadUvarint(br); err != nil {
				return fmt.Errorf("fsm: restore: read-lease record: %w", err)
			}
		}
		if v[1] > math.MaxInt64 {
			return fmt.Errorf("fsm: restore: read-lease horizon %d out of range", v[1])
		}
		readLeases = ReadLeaseState{GrantTerm: v[0], Horizon: time.Duration(v[1]), Cleared: v[2]}
	}
	var authState []byte
	if version >= snapshotV5 {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("fsm: restore: auth length: %w", err)
		}
		if n > 64<<20 {
			return fmt.Errorf("fsm: restore: auth section of %d bytes is corrupt", n)
		}
		authState = make([]byte, n)
		if _, err := io.ReadFull(br, authState); err != nil {
			return fmt.Errorf("fsm: restore: auth: %w", err)
		}
	}
	f.lmu.Lock()
	defer f.lmu.Unlock()
	if err := f.store.Restore(br); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	f.leases.Restore(int64(leaseClock), leases)
	if authState == nil {
		// A snapshot from before auth existed: auth off, no users.
		authState, _ = auth.New(auth.Config{}).Marshal()
	}
	if err := f.auth.Restore(authState); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	members := make(map[uint64]*pb.Member, len(list.Members))
	for _, m := range list.Members {
		members[m.ID] = m
	}
	f.mu.Lock()
	f.clusterID = clusterID
	f.members = members
	f.alarms.Store(&alarms)
	f.readLeases = readLeases
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

// ReadSnapshot reads a corenode snapshot from src, checking that it
// decodes completely, and returns what a new cluster seeded from it keeps
// (see Contents and Seed).
func ReadSnapshot(src io.Reader, logger *slog.Logger) (Contents, error) {
	f := New(logger, nil, nil)
	if err := f.Restore(io.NopCloser(src)); err != nil {
		return Contents{}, err
	}
	return f.Contents(), nil
}

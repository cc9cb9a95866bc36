package fsm

import (
	"context"
	"fmt"
	"log/slog"
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
	// incarnation is the cluster's (incarnation.go), guarded by mu.
	incarnation   uint64
	onIncarnation func(uint64)

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
	case OpIncarnation:
		return Result{Resp: f.applyIncarnation(cmd.Msg.(*Incarnation))}
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
	// The size test first: it is one atomic load, and only a store near its
	// quota needs the walk of a Txn's ops that addsData may take, which the
	// read-lease gate takes again on the leader.
	return quota > 0 && f.store.Size()+int64(msg.Size()) > quota && addsData(op, msg)
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

// revoke removes a lease and deletes its keys in one revision.
func (f *FSM) revoke(id int64) int64 {
	_ = f.leases.Revoke(id)
	rev := f.store.DeleteKeys(f.store.LeaseKeys(id))
	f.observer.Removed(id)
	return rev
}

package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/logstore"
)

// A member never applies two histories. Two guards keep it so:
//
//   - The cluster's incarnation (fsm/incarnation.go), which the raft
//     stream's handshake exchanges (transport.PeerIdentity): a member
//     refuses raft traffic with a member of another incarnation. That is the
//     guard that catches a cluster bootstrapped again beside a survivor of
//     the old one, whose logs raft cannot tell apart (same IDs, same
//     configuration entry, early entries of the same terms).
//   - checkAppend: a follower refuses a leader's append that would replace
//     an entry it has already applied, which raft would otherwise do
//     silently (truncate the log's tail, keep the state already applied).
//
// A member that finds itself outvoted by another history, or asked to drop
// what it applied, stops (Halted): its data holds writes the others lack,
// and nothing it answered from then on could be right. The members of the
// majority go on serving and only refuse the odd one out, so a survivor
// started beside a cluster bootstrapped again cannot stop that cluster.

// ErrAnotherHistory is the cause of a halt: wrapped in HistoryError, with
// what was found and what to do.
var ErrAnotherHistory = errors.New("this member's data is of another history than the cluster's")

// HistoryError says why a member halted, and how to recover.
type HistoryError struct {
	What   string // what was found
	ID     uint64 // this member's
	Dir    string // its data dir
	LogDir string // its raft log's dir (--wal-dir), or empty
	Others string // the members of the other history
}

func (e *HistoryError) Error() string {
	return fmt.Sprintf("%v: %s. Both histories may hold acknowledged writes the other lacks. "+
		"To keep the cluster's (%s): remove this member (etcdctl member remove %x), delete %s, "+
		"add it again (etcdctl member add) and start it with --initial-cluster-state existing. "+
		"To keep this member's instead: stop the others and restart this member alone with --force-new-cluster, "+
		"then add members back (docs/operations.md#losing-members-for-good)",
		ErrAnotherHistory, e.What, e.Others, e.ID, logstore.WhatToDelete(e.Dir, e.LogDir))
}

func (e *HistoryError) Unwrap() error { return ErrAnotherHistory }

// Fence is this member's side of the raft stream's handshake and the
// judge of what it learns there (transport.PeerIdentity): Local says who
// this member is, Admit whether a peer may exchange raft traffic with it.
//
// Concurrency: Local and Admit are called from the transport's connection
// goroutines, any number at once, from before raft starts (a member's ID
// and incarnation are set before then, in New); the incarnation changes on
// the FSM's apply goroutine. Halted is closed at most once.
type Fence struct {
	log    *slog.Logger
	id     atomic.Uint64
	inc    atomic.Uint64
	dir    string
	logDir string

	mu sync.Mutex
	// foreign is each peer met with another incarnation, and that one.
	foreign map[uint64]uint64
	// voters lists the voting members, this one included; nil until raft
	// runs, and until then nobody is counted out.
	voters func() []uint64

	halted  chan struct{}
	haltErr error
	once    sync.Once
}

// NewFence returns a fence that admits everyone until New gives it the
// member's ID and incarnation.
func NewFence(logger *slog.Logger) *Fence {
	if logger == nil {
		logger = slog.Default()
	}
	return &Fence{log: logger, foreign: map[uint64]uint64{}, halted: make(chan struct{})}
}

// Local is this member's ID and its cluster's incarnation (0: not known yet,
// a member that has not applied its cluster's first leader's entry).
func (f *Fence) Local() (id, incarnation uint64) { return f.id.Load(), f.inc.Load() }

// Admit says whether raft traffic may flow with member id, whose cluster
// incarnation is incarnation. A member that knows none yet (a new member,
// or one of a version without incarnations) is admitted: it holds nothing
// it applied of another history that raft could not catch.
func (f *Fence) Admit(id, incarnation uint64) error {
	own := f.inc.Load()
	f.mu.Lock()
	defer f.mu.Unlock()
	if own == 0 || incarnation == 0 || own == incarnation {
		delete(f.foreign, id)
		return nil
	}
	if f.foreign[id] != incarnation {
		f.foreign[id] = incarnation
		f.log.Error("refusing raft traffic with a member of another history: the cluster was bootstrapped again "+
			"(--initial-cluster-state new over lost data dirs) while one of the histories was away",
			"member", fmt.Sprintf("%x", id), "its-incarnation", fmt.Sprintf("%x", incarnation),
			"this-incarnation", fmt.Sprintf("%x", own))
	}
	err := fmt.Errorf("node: member %x is of cluster incarnation %x, this member of %x: %w", id, incarnation, own, ErrAnotherHistory)
	if f.voters == nil {
		return err
	}
	// Outvoted: a quorum of the voters holds the other history.
	voters := f.voters()
	var others []string
	for _, v := range voters {
		if _, ok := f.foreign[v]; ok && v != f.id.Load() {
			others = append(others, fmt.Sprintf("%x", v))
		}
	}
	if len(voters) > 0 && len(others) >= len(voters)/2+1 {
		slices.Sort(others)
		f.halt(&HistoryError{
			What: fmt.Sprintf("a quorum of the voters (%s) holds cluster incarnation %x, this member %x",
				strings.Join(others, ", "), incarnation, own),
			ID: f.id.Load(), Dir: f.dir, LogDir: f.logDir, Others: strings.Join(others, ", "),
		})
	}
	return err
}

// Halted is closed once this member found it holds another history than
// its cluster's; HaltErr then says what and how to recover. The process
// should stop: nothing it serves could be right.
func (f *Fence) Halted() <-chan struct{} { return f.halted }

// HaltErr is the reason Halted was closed, nil before.
func (f *Fence) HaltErr() error {
	select {
	case <-f.halted:
		return f.haltErr
	default:
		return nil
	}
}

// halt records err and closes Halted, the first time.
func (f *Fence) halt(err error) {
	f.once.Do(func() {
		f.haltErr = err
		f.log.Error("stopping: " + err.Error())
		close(f.halted)
	})
}

// setIncarnation takes on the incarnation the FSM applied or restored.
func (f *Fence) setIncarnation(inc uint64) {
	if f.inc.Swap(inc) != inc {
		// Peers counted out against the old incarnation may hold the new one.
		f.mu.Lock()
		clear(f.foreign)
		f.mu.Unlock()
	}
}

// keyCurrentTerm is where hashicorp/raft keeps its current term in the
// stable store (its unexported keyCurrentTerm).
var keyCurrentTerm = []byte("CurrentTerm")

// keyIncarnation keeps the incarnation in the raft stable store, so a
// restarted member states it from its first connection, before it has
// applied anything: its log is replayed only once a leader names the
// commit index, which is too late for the check.
var keyIncarnation = []byte("corenode-incarnation")

// checkAppend refuses a leader's append that would replace an entry this
// member has applied (see the top of this file). raft only ever replaces
// uncommitted entries of a log that shares the leader's history, and an
// applied entry is committed, so the check never refuses a healthy
// leader. Entries below the log's start are in the snapshot and are not
// compared; in a healthy cluster the leader never resends them.
//
// An append of a term older than this member's is let through unjudged:
// raft refuses it on its term alone. A leader cut off by a split, or
// paused, and deposed meanwhile, sends the entries of its old term that it
// never committed, and the majority may have applied others at those
// indexes; that is raft working, not another history.
func (n *Node) checkAppend(a *raft.AppendEntriesRequest) error {
	// The ordinary append carries only entries past the applied index:
	// it costs one comparison, and no read of the stable store.
	applied := n.fsm.Applied()
	if len(a.Entries) == 0 || a.Entries[0].Index > applied {
		return nil
	}
	// raft saves a new term in the stable store before it acts in it, so
	// the stored term is at least the one raft will judge this append by.
	if term, err := n.termStore.GetUint64(keyCurrentTerm); err == nil && a.Term < term {
		return nil
	}
	for _, e := range a.Entries {
		if e.Index > applied {
			break
		}
		var have raft.Log
		if err := n.logs.GetLog(e.Index, &have); err != nil {
			continue
		}
		// Commands must match to the byte; the configuration entry a
		// bootstrap writes on each member is compared by term and type
		// only, since each member encoded its own.
		if have.Term == e.Term && have.Type == e.Type && (e.Type != raft.LogCommand || bytes.Equal(have.Data, e.Data)) {
			continue
		}
		leader, _ := ParseServerID(raft.ServerID(a.ID))
		err := &HistoryError{
			What: fmt.Sprintf("the leader %x (term %d) sent entry %d of term %d, which differs from the entry of term %d this member applied",
				leader, a.Term, e.Index, e.Term, have.Term),
			ID: n.cfg.ID, Dir: n.cfg.DataDir, LogDir: n.cfg.LogDir, Others: fmt.Sprintf("led by %x", leader),
		}
		n.fence.halt(err)
		return err
	}
	return nil
}

// setUpFence gives the fence this member's ID and the incarnation its
// stable store keeps, and keeps the store up to date with the FSM's, all
// before raft starts.
func (n *Node) setUpFence() error {
	n.fence = n.cfg.Fence
	if n.fence == nil {
		n.fence = NewFence(n.log)
	}
	n.fence.id.Store(n.cfg.ID)
	n.fence.dir, n.fence.logDir = n.cfg.DataDir, n.cfg.LogDir
	// raft-boltdb answers a missing key with "not found", raft-wal with 0.
	inc, err := n.store.GetUint64(keyIncarnation)
	if err != nil && err.Error() != "not found" {
		return fmt.Errorf("node: read the cluster incarnation: %w", err)
	}
	n.fence.setIncarnation(inc)
	n.fsm.OnIncarnation(func(inc uint64) {
		if n.fence.inc.Load() == inc {
			return
		}
		n.fence.setIncarnation(inc)
		if err := n.store.SetUint64(keyIncarnation, inc); err != nil {
			n.log.Error("cannot persist the cluster incarnation; a restart before the next snapshot states none", "err", err)
		}
	})
	return nil
}

// Halted is closed once this member found it holds another history than
// its cluster's (fence.go); HaltErr says what, and how to recover.
func (n *Node) Halted() <-chan struct{} { return n.fence.Halted() }

// HaltErr is why Halted was closed.
func (n *Node) HaltErr() error { return n.fence.HaltErr() }

// newIncarnation proposes the cluster's incarnation when it has none; the
// leader calls it after its barrier, so the FSM's answer is current.
//
// A history keeps its one incarnation, --force-new-cluster included: a
// member catching up applies the log in order, and must never pass through
// an incarnation other than its leader's (it would find itself outvoted).
// The members a forced recovery drops are out of the configuration, so
// raft neither replicates to them nor counts their votes; their data dirs
// are to be deleted (docs/operations.md).
func (n *Node) newIncarnation(ctx context.Context) error {
	if n.fsm.Incarnation() != 0 {
		return nil
	}
	var b [8]byte
	var id uint64
	for id == 0 {
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("node: draw an incarnation: %w", err)
		}
		id = binary.BigEndian.Uint64(b[:])
	}
	if _, err := n.Propose(ctx, fsm.OpIncarnation, &fsm.Incarnation{ID: id}); err != nil {
		return fmt.Errorf("node: propose the cluster incarnation: %w", err)
	}
	return nil
}

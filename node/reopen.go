package node

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// reopenableStore is the member's log store behind a lock that lets the
// storage probe close and reopen it under a running raft: after a failed
// write the only state to trust is what reached the disk, and raft-wal
// 0.4.2 needs the reopen to append again after a failed segment rotation
// (its writer stays sealed, answering every append with "segment is
// sealed"; opening the log again recovers the tail and creates the next
// segment).
//
// Concurrency: every method holds mu for reading; reopen holds it for
// writing, so raft's calls wait out a reopen and never see a closed store.
type reopenableStore struct {
	mu    sync.RWMutex
	store logStore
	open  func() (logStore, error)
}

func (r *reopenableStore) reopen(retry func(error) bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.store.Close(); err != nil {
		return fmt.Errorf("close the log store: %w", err)
	}
	for {
		s, err := r.open()
		if err == nil {
			r.store = s
			return nil
		}
		// raft must not see the closed store (it panics on some failed
		// reads), so it waits, on the lock, until the store opens or the
		// member stops.
		if !retry(err) {
			return fmt.Errorf("reopen the log store: %w", err)
		}
	}
}

func (r *reopenableStore) FirstIndex() (uint64, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.store.FirstIndex()
}

func (r *reopenableStore) LastIndex() (uint64, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.store.LastIndex()
}

func (r *reopenableStore) GetLog(index uint64, l *raft.Log) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.store.GetLog(index, l)
}

func (r *reopenableStore) StoreLog(l *raft.Log) error { return r.StoreLogs([]*raft.Log{l}) }

func (r *reopenableStore) StoreLogs(logs []*raft.Log) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.store.StoreLogs(logs)
}

func (r *reopenableStore) DeleteRange(min, max uint64) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.store.DeleteRange(min, max)
}

func (r *reopenableStore) Set(key, val []byte) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.store.Set(key, val)
}

func (r *reopenableStore) Get(key []byte) ([]byte, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.store.Get(key)
}

func (r *reopenableStore) SetUint64(key []byte, val uint64) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.store.SetUint64(key, val)
}

func (r *reopenableStore) GetUint64(key []byte) (uint64, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.store.GetUint64(key)
}

// IsMonotonic does not change across a reopen: the same kind of store opens.
func (r *reopenableStore) IsMonotonic() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return isMonotonic(r.store)
}

func (r *reopenableStore) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.store.Close()
}

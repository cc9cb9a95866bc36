package logstore

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Config says which store to open, where, and what to report to.
type Config struct {
	// DataDir is the member's data dir: the store is DataDir/wal/ or
	// DataDir/raft.db, unless LogDir is set. Open creates it when missing.
	DataDir string
	// LogDir, when set, holds the store instead of DataDir (--wal-dir).
	// The advice of a CorruptError names both.
	LogDir string
	// Kind names the store: WAL or BoltDB. An existing data dir keeps the
	// store it holds and refuses another by name (MismatchError); empty
	// means that store, or Default in a new data dir.
	Kind string
	// ID is the member's ID, which a CorruptError's advice names.
	ID uint64
	// Logger receives the store's own messages (the disk's health, log
	// verification); nil means slog.Default().
	Logger *slog.Logger
	// WALLogger receives raft-wal's messages; nil discards them.
	WALLogger hclog.Logger
	// ProbeInterval is how often Probe tries the disk while the store
	// cannot persist; zero means 1 s.
	ProbeInterval time.Duration
	// NoSync writes without fsync (etcd's --unsafe-no-fsync): raft-wal's
	// segment files and meta database, or raft.db. An append returns once
	// the OS has the bytes, so a crash of the machine (not of the process)
	// can lose entries this member acknowledged, and with them its
	// agreement with the others. For tests and throw-away clusters only.
	NoSync bool
}

// Store is one member's raft log and stable store: raft.LogStore,
// raft.StableStore and raft.MonotonicLogStore, with the guarantees the
// package comment states.
//
// It keeps the opened store behind a lock that lets Probe close and reopen
// it under a running raft: after a failed write the only state to trust is
// what reached the disk, and raft-wal 0.4.2 needs the reopen to append
// again after a failed segment rotation (its writer stays sealed,
// answering every append with "segment is sealed"; opening the log again
// recovers the tail and creates the next segment).
//
// Concurrency: every method may be called from any goroutine. The log and
// stable methods hold mu for reading; a reopen holds it for writing, so
// raft's calls wait out a reopen and never see a closed store.
type Store struct {
	dir, kind string
	// dataDir and logDir are Config's, for the advice to the operator
	// (WhatToDelete); dir is where the store is.
	dataDir, logDir string
	log             *slog.Logger
	health          *Health
	metrics         *metrics
	// interval and ticker pace Probe; tests replace ticker.
	interval time.Duration
	ticker   func(time.Duration) (<-chan time.Time, func())

	mu   sync.RWMutex
	disk backend
	open func() (backend, error)
}

// Open opens the store cfg names, creating it in a new data dir, and
// reads every entry back, so that a damaged log stops the member here
// with a CorruptError rather than in raft, which panics on a log it cannot
// read while it starts. A data dir that holds another store than the one
// asked for is a MismatchError; one a running member holds is refused at
// once. Errors name no package; the caller adds its own.
func Open(cfg Config) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WALLogger == nil {
		cfg.WALLogger = hclog.NewNullLogger()
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = defaultProbeInterval
	}
	dir := cmp.Or(cfg.LogDir, cfg.DataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	kind, err := choose(dir, cfg.Kind)
	if err != nil {
		return nil, err
	}
	open := func() (backend, error) { return openStoreNoSync(dir, kind, cfg.WALLogger, cfg.NoSync) }
	disk, err := open()
	if err != nil {
		if c := (*CorruptError)(nil); errors.As(err, &c) {
			c.ID, c.DataDir, c.LogDir = cfg.ID, cfg.DataDir, cfg.LogDir
			return nil, c
		}
		return nil, fmt.Errorf("open %s raft log in %s: %w", kind, dir, err)
	}
	h := NewHealth(cfg.Logger)
	return &Store{dir: dir, kind: kind, dataDir: cfg.DataDir, logDir: cfg.LogDir, log: cfg.Logger, health: h, metrics: newMetrics(h),
		interval: cfg.ProbeInterval, ticker: systemTicker, disk: disk, open: open}, nil
}

// Kind is the store this data dir holds (WAL or BoltDB).
func (s *Store) Kind() string { return s.kind }

// Size is the bytes the store keeps on disk: raft.db, or the wal's
// segments and meta database.
func (s *Store) Size() int64 { return diskSize(s.dir, s.kind) }

// Health is whether the store can persist; see Health.
func (s *Store) Health() *Health { return s.health }

// reopen closes the store and opens it again; while it cannot open, it
// asks retry whether to try again.
func (s *Store) reopen(retry func(error) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.disk.Close(); err != nil {
		return fmt.Errorf("close the log store: %w", err)
	}
	for {
		d, err := s.open()
		if err == nil {
			s.disk = d
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

// FirstIndex returns the first index written; 0 for no entries.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.disk.FirstIndex()
}

// LastIndex returns the last index written; 0 for no entries.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.disk.LastIndex()
}

// GetLog reads the entry at index into l: raft.ErrLogNotFound when the log
// does not hold it, and an error, never another entry's or changed bytes,
// when the wal's entry fails its checksum.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.disk.GetLog(index, l)
}

// StoreLog stores one entry, as StoreLogs.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores logs, contiguous with the log's end (the wal refuses a
// gap: IsMonotonic), and returns once they are durable (fsynced). It
// records how long that took (corenode_disk_fsync_seconds): this is the
// disk latency every write waits for.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	start := time.Now()
	s.mu.RLock()
	err := s.disk.StoreLogs(logs)
	s.mu.RUnlock()
	s.metrics.fsync.Observe(time.Since(start).Seconds())
	return err
}

// DeleteRange deletes the entries min..max, inclusive: the head after a
// snapshot, or the tail a new leader replaced.
func (s *Store) DeleteRange(min, max uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.disk.DeleteRange(min, max)
}

// Set stores val under key, durably before it returns.
func (s *Store) Set(key, val []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.disk.Set(key, val)
}

// Get returns the value of key: raft-boltdb answers a missing key with an
// error whose text is "not found", raft-wal with an empty value.
func (s *Store) Get(key []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.disk.Get(key)
}

// SetUint64 stores val under key, durably before it returns.
func (s *Store) SetUint64(key []byte, val uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.disk.SetUint64(key, val)
}

// GetUint64 returns the value of key: raft-boltdb answers a missing key
// with an error whose text is "not found", raft-wal with 0.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.disk.GetUint64(key)
}

// IsMonotonic is whether the store refuses appends that leave a gap (the
// wal does); it does not change across a reopen: the same kind of store
// opens.
func (s *Store) IsMonotonic() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return isMonotonic(s.disk)
}

// Close closes the store and releases its lock on the data dir. A Verifier
// over it must be closed first.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disk.Close()
}

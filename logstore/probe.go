package logstore

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Probe parameters: how often a member that cannot persist tries the disk,
// and how much it writes. It also asks for that much free space, and with
// the wal for a segment more: nearly every way a wal append fails on a
// full disk ends with raft-wal creating its next segment (16 MiB,
// preallocated) once it can, so with less than that the member would call
// itself writable, lead, fail its first append and step down again, one
// term higher each time.
const (
	defaultProbeInterval = time.Second
	probeBytes           = 64 << 10
)

// Probe heals the store's Health, and runs until stop closes: idle while
// the store can persist, and while it cannot, it tries the disk every
// Config.ProbeInterval; once the disk takes a write it reopens the store
// and clears the state. The member runs it on a goroutine of its own.
func (s *Store) Probe(stop <-chan struct{}) {
	for {
		ch := s.health.Changed()
		if s.health.Writable() {
			select {
			case <-stop:
				return
			case <-ch:
				continue
			}
		}
		ticks, stopTicker := s.ticker(s.interval)
		tick := func() bool {
			select {
			case <-stop:
				return false
			case <-ticks:
				return true
			}
		}
		for !s.health.Writable() && tick() {
			if err := s.try(tick); err != nil {
				s.log.Debug("the disk does not take writes yet", "err", err)
				continue
			}
			s.health.Clear()
		}
		stopTicker()
		select {
		case <-stop:
			return
		default:
		}
	}
}

// try checks that the store's directory has room and takes an fsynced
// write, then reopens the store; tick waits for the next try.
func (s *Store) try(tick func() bool) error {
	dir, need := s.dir, uint64(probeBytes)
	if s.kind == WAL {
		dir, need = filepath.Join(dir, walDir), need+walSegmentSize
	}
	if err := probeDir(dir, need); err != nil {
		return err
	}
	return s.reopen(func(err error) bool {
		s.log.Error("the disk takes writes again, but the raft log does not open; raft waits for it", "err", err)
		return tick()
	})
}

// probeDir checks that dir has need bytes free and takes a write of
// probeBytes, fsynced, in a file it then removes.
func probeDir(dir string, need uint64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if free := st.Bavail * uint64(st.Bsize); free < need {
		return fmt.Errorf("%s: %d bytes free, %d needed", dir, free, need)
	}
	f, err := os.CreateTemp(dir, ".probe-")
	if err != nil {
		return fmt.Errorf("create probe file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, probeBytes)); err != nil {
		return fmt.Errorf("write probe file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync probe file: %w", err)
	}
	return nil
}

// systemTicker is the ticker Probe uses unless a test replaces it.
func systemTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

//go:build unix

package freeport

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// lock holds port against every other process that uses this package, for
// the rest of this process's life. The lock is a flock on a file per port,
// which the kernel drops when the process exits, however it exits, so no
// lock outlives its owner. It reports false if another process holds it.
func lock(port int) bool {
	dir := filepath.Join(os.TempDir(), "corenode-freeport")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no locks possible here: the bind probe alone guards
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	// f is never closed: closing it would drop the lock.
	return true
}

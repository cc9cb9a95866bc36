//go:build unix

package etcdrelease

import (
	"os"
	"syscall"
)

// lock takes an exclusive flock on path, waiting for another process's
// build to finish; the kernel drops it if the process dies.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

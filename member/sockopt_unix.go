//go:build unix

package member

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// control sets etcd's --socket-reuse-port and --socket-reuse-address on a
// listening socket before it binds.
func (o SocketOpts) control(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if o.ReusePort {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
				return
			}
		}
		if o.ReuseAddress {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

//go:build !unix

package member

import (
	"errors"
	"syscall"
)

func (o SocketOpts) control(_, _ string, _ syscall.RawConn) error {
	if o.ReusePort || o.ReuseAddress {
		return errors.New("--socket-reuse-port and --socket-reuse-address need a Unix system")
	}
	return nil
}

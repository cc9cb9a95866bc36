package transport

import (
	"context"
	"net"
)

// PipeListener is a net.Listener whose connections are made in memory by
// Dial, so a member's own components can call its gRPC server without a
// socket: the JSON gateway translates each HTTP request into a gRPC call on
// such a connection, as etcd's gateway dials its own client port, but with
// no port, TLS or kernel buffer in between.
//
// Accept, Dial and Close may be called from any goroutine. After Close,
// Accept returns net.ErrClosed and Dial fails.
type PipeListener struct{ r *route }

// pipeAddr names the listener's end in logs and peer information.
type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "corenode-internal" }

// NewPipeListener returns an open listener.
func NewPipeListener() *PipeListener { return &PipeListener{r: newRoute(pipeAddr{})} }

// Accept waits for the next Dial.
func (p *PipeListener) Accept() (net.Conn, error) { return p.r.Accept() }

// Close stops Accept and later Dials; connections already made stay open
// until their users close them.
func (p *PipeListener) Close() error { return p.r.Close() }

// Addr is a placeholder address.
func (p *PipeListener) Addr() net.Addr { return pipeAddr{} }

// Dial returns the client end of a new connection whose server end Accept
// yields. It fails once ctx ends or the listener is closed.
func (p *PipeListener) Dial(ctx context.Context, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case p.r.conns <- server:
		return client, nil
	case <-p.r.closed:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, net.ErrClosed
}

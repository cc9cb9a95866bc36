package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Peer connections begin with one byte that names what the stream carries,
// so raft and member-to-member gRPC share the one peer port that operators
// configure (--listen-peer-urls), as etcd's peer port carries both.
const (
	streamRaft    byte = 'R'
	streamGRPC    byte = 'G'
	streamPropose byte = 'P' // a follower's proposal stream (proposeconn.go)
	// streamProposeReads is a proposal stream on which the follower also
	// asks the leader's read index (proposeconn.go); a member of an earlier
	// version does not know it.
	streamProposeReads byte = 'Q'
)

// preambleTimeout bounds how long a new connection may take to say what it
// is, so a silent client cannot hold an accept slot.
const preambleTimeout = 5 * time.Second

// route is one destination of a mux: a net.Listener fed by the mux.
type route struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newRoute(addr net.Addr) *route {
	return &route{addr: addr, conns: make(chan net.Conn, 64), closed: make(chan struct{})}
}

func (r *route) Accept() (net.Conn, error) {
	select {
	case c := <-r.conns:
		return c, nil
	case <-r.closed:
		return nil, net.ErrClosed
	}
}

func (r *route) Close() error {
	r.once.Do(func() { close(r.closed) })
	return nil
}

func (r *route) Addr() net.Addr { return r.addr }

func (r *route) deliver(c net.Conn) {
	select {
	case r.conns <- c:
	case <-r.closed:
		c.Close()
	}
}

// mux splits one listener into routes by looking at the first bytes of each
// connection. classify gets a buffered reader positioned at the start of the
// stream and returns the route, having consumed only what it must.
type mux struct {
	ln       net.Listener
	log      *slog.Logger
	classify func(c net.Conn, br *bufio.Reader) (*route, error)
	routes   []*route
}

func (m *mux) serve() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			for _, r := range m.routes {
				r.Close()
			}
			if !errors.Is(err, net.ErrClosed) {
				m.log.Error("accept failed", "addr", m.ln.Addr(), "err", err)
			}
			return
		}
		go m.route(c)
	}
}

func (m *mux) route(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(preambleTimeout))
	br := bufio.NewReader(c)
	r, err := m.classify(c, br)
	if err != nil {
		m.log.Debug("dropping connection", "remote", c.RemoteAddr(), "err", err)
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	r.deliver(&bufferedConn{Conn: c, r: br})
}

// bufferedConn replays what classification peeked before the rest of the stream.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// tlsState is the TLS connection's state, when the connection is one
// (classification read from it, so its handshake is done).
func (b *bufferedConn) tlsState() (tls.ConnectionState, bool) {
	if tc, ok := b.Conn.(*tls.Conn); ok {
		return tc.ConnectionState(), true
	}
	return tls.ConnectionState{}, false
}

// PeerMux splits the peer listener into the raft stream layer and the
// member-to-member gRPC listener, and dials other members' peer ports.
type PeerMux struct {
	m       mux
	raft    *route
	grpc    *route
	propose *route
	adv     net.Addr
	cfg     PeerConfig

	identity atomic.Pointer[PeerIdentity] // hello.go
	legacy   legacyPeers
	links    links // links.go
}

// PeerConfig says how members reach each other.
type PeerConfig struct {
	// Advertise is the address other members dial, which raft records as
	// this member's address.
	Advertise string
	// ServerTLS, when set, wraps every accepted peer connection; set
	// ClientAuth to tls.RequireAndVerifyClientCert for mutual TLS.
	ServerTLS *tls.Config
	// ClientTLS, when set, wraps every connection this member dials.
	ClientTLS *tls.Config
	// LocalIP, when set, is the source address of dialed connections, so a
	// member bound to one address of a multi-homed host is seen from it (and
	// so a fault-injecting proxy can tell the members apart on loopback).
	LocalIP net.IP
	// RaftDialTimeout, when positive, bounds opening a raft connection (TCP,
	// TLS, preamble and hello) below the raft transport's I/O timeout: a
	// dial begun while a link drops packets otherwise hangs for that whole
	// timeout, and raft's replicator with it, after the link is back.
	RaftDialTimeout time.Duration
}

// NewPeerMux serves ln.
func NewPeerMux(ln net.Listener, cfg PeerConfig, logger *slog.Logger) (*PeerMux, error) {
	if _, _, err := net.SplitHostPort(cfg.Advertise); err != nil {
		return nil, fmt.Errorf("transport: advertised peer address %q: %w", cfg.Advertise, err)
	}
	// Raft tells other members this address as the leader's; keeping the
	// name rather than an IP resolved now lets them follow a member whose
	// address changes across restarts (a container's, say).
	adv := advertised(cfg.Advertise)
	if cfg.ServerTLS != nil {
		ln = tls.NewListener(ln, cfg.ServerTLS)
	}
	p := &PeerMux{raft: newRoute(adv), grpc: newRoute(ln.Addr()), propose: newRoute(ln.Addr()), adv: adv, cfg: cfg}
	p.m = mux{ln: ln, log: logger, routes: []*route{p.raft, p.grpc, p.propose}}
	p.m.classify = func(c net.Conn, br *bufio.Reader) (*route, error) {
		b, err := br.ReadByte()
		if err != nil {
			return nil, err
		}
		switch b {
		case streamRaft:
			return p.raft, nil
		case streamRaftHello:
			if err := p.acceptHello(c, br); err != nil {
				return nil, err
			}
			return p.raft, nil
		case streamGRPC:
			return p.grpc, nil
		case streamPropose, streamProposeReads:
			return p.propose, nil
		}
		return nil, fmt.Errorf("unknown peer stream type %q", b)
	}
	go p.m.serve()
	return p, nil
}

// Close stops accepting peer connections.
func (p *PeerMux) Close() error { return p.m.ln.Close() }

// advertised is a peer address as configured, host name unresolved.
type advertised string

func (a advertised) Network() string { return "tcp" }
func (a advertised) String() string  { return string(a) }

// Addr is the address the peer listener is bound to.
func (p *PeerMux) Addr() net.Addr { return p.m.ln.Addr() }

// GRPCListener yields member-to-member gRPC connections.
func (p *PeerMux) GRPCListener() net.Listener { return p.grpc }

// ProposalListener yields the proposal connections of followers
// (proposeconn.go).
func (p *PeerMux) ProposalListener() net.Listener { return p.propose }

// DialGRPC opens a member-to-member gRPC connection to a peer address.
func (p *PeerMux) DialGRPC(ctx context.Context, addr string) (net.Conn, error) {
	return p.dial(ctx, addr, streamGRPC)
}

// RaftTransport returns hashicorp/raft's network transport over this mux.
func (p *PeerMux) RaftTransport(logger *slog.Logger) *RaftTransport {
	return &RaftTransport{NetworkTransport: raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &raftLayer{route: p.raft, p: p},
		MaxPool: 4,
		Timeout: 10 * time.Second,
		Logger:  nullHCLog(),
	}), p: p}
}

// raftLayer is raft.StreamLayer over the mux.
type raftLayer struct {
	*route
	p *PeerMux
}

func (l *raftLayer) Addr() net.Addr { return l.p.adv }

// Dial opens a raft connection bound to address's link (links.go): a
// BreakLinks aborts it while it dials, and closes it after.
func (l *raftLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	link := l.p.links.get(string(address))
	if d := l.p.cfg.RaftDialTimeout; d > 0 && d < timeout {
		timeout = d
	}
	ctx, cancel := context.WithTimeout(link, timeout)
	defer cancel()
	c, err := l.p.dialRaft(ctx, string(address))
	if err != nil {
		return nil, err
	}
	return bind(link, c), nil
}

// dial opens a peer connection that begins with preamble: the stream's
// kind, and whatever that kind sends first.
func (p *PeerMux) dial(ctx context.Context, addr string, preamble ...byte) (net.Conn, error) {
	var d net.Dialer
	if p.cfg.LocalIP != nil {
		d.LocalAddr = &net.TCPAddr{IP: p.cfg.LocalIP}
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if p.cfg.ClientTLS != nil {
		cfg := p.cfg.ClientTLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("transport: TLS handshake with peer %s: %w", addr, err)
		}
		c = tc
	}
	if _, err := c.Write(preamble); err != nil {
		c.Close()
		return nil, fmt.Errorf("transport: peer preamble to %s: %w", addr, err)
	}
	return c, nil
}

// ClientMux splits the client listener into gRPC (HTTP/2 with prior
// knowledge, which every gRPC client speaks) and plain HTTP/1 for /health,
// /metrics and friends, as etcd serves both on its client port.
type ClientMux struct {
	m    mux
	grpc *route
	http *route
}

var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// NewClientMux serves ln, through TLS when tlsCfg is set.
func NewClientMux(ln net.Listener, tlsCfg *tls.Config, logger *slog.Logger) *ClientMux {
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	c := &ClientMux{grpc: newRoute(ln.Addr()), http: newRoute(ln.Addr())}
	c.m = mux{ln: ln, log: logger, routes: []*route{c.grpc, c.http}}
	c.m.classify = func(_ net.Conn, br *bufio.Reader) (*route, error) {
		b, err := br.Peek(3)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if string(b) == string(h2Preface[:3]) {
			return c.grpc, nil
		}
		return c.http, nil
	}
	go c.m.serve()
	return c
}

// GRPC yields gRPC connections.
func (c *ClientMux) GRPC() net.Listener { return c.grpc }

// HTTP yields HTTP/1 connections.
func (c *ClientMux) HTTP() net.Listener { return c.http }

// Close stops accepting client connections.
func (c *ClientMux) Close() error { return c.m.ln.Close() }

package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The raft stream's handshake. A member that knows its identity opens a
// raft connection with streamRaftHello, its member ID and its cluster's
// incarnation; the accepting member answers with a status byte and its own
// two, and each side asks its PeerIdentity whether it admits the other.
// Raft traffic flows only when both do. It costs one round trip per new
// connection, and raft keeps its connections pooled.
//
// Two histories that share a cluster ID (a cluster bootstrapped again over
// lost data dirs beside a survivor of the old one) are told apart here,
// before raft could mix them: raft's own checks pass between them (package
// node, fence.go).
//
// A member of an earlier version closes a connection whose first byte it
// does not know; the dialer then opens plain streamRaft connections to it,
// and tries the handshake again a minute later (legacyRetry).

const (
	streamRaftHello byte = 'I'
	helloAdmitted   byte = 'K'
	helloRefused    byte = 'X'
)

// PeerIdentity is what the raft stream's handshake says of this member and
// how it judges the other side (node.Fence implements it).
//
// Both methods are called from connection goroutines, any number at once.
type PeerIdentity interface {
	// Local is this member's ID and its cluster's incarnation (0: none
	// known yet).
	Local() (id, incarnation uint64)
	// Admit says whether raft traffic may flow with member id of the given
	// incarnation; an error refuses it.
	Admit(id, incarnation uint64) error
}

// ErrRefusedByPeer is a dial the peer refused at the handshake: it holds
// another history.
var ErrRefusedByPeer = errors.New("transport: the peer refused this member's raft connection: it holds another history")

// SetIdentity makes every raft connection from now on start with the
// handshake, stating and judging by id. Call it before raft starts.
func (p *PeerMux) SetIdentity(id PeerIdentity) { p.identity.Store(&id) }

func (p *PeerMux) peerIdentity() PeerIdentity {
	if id := p.identity.Load(); id != nil {
		return *id
	}
	return nil
}

// appendHello appends a member ID and an incarnation as the handshake
// carries them.
func appendHello(b []byte, id, inc uint64) []byte {
	b = binary.BigEndian.AppendUint64(b, id)
	return binary.BigEndian.AppendUint64(b, inc)
}

// legacyPeers remembers the peers of an earlier version, by address.
type legacyPeers struct {
	mu    sync.Mutex
	since map[string]time.Time
}

func (l *legacyPeers) is(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.since[addr]
	return ok && time.Since(t) < legacyRetry
}

func (l *legacyPeers) mark(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.since == nil {
		l.since = map[string]time.Time{}
	}
	l.since[addr] = time.Now()
}

// dialRaft opens a raft connection to addr, with the handshake when this
// member has an identity and addr is not of an earlier version.
func (p *PeerMux) dialRaft(ctx context.Context, addr string) (net.Conn, error) {
	id := p.peerIdentity()
	if id == nil || p.legacy.is(addr) {
		return p.dial(ctx, addr, streamRaft)
	}
	self, inc := id.Local()
	c, err := p.dial(ctx, addr, appendHello([]byte{streamRaftHello}, self, inc)...)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(dl)
	}
	// A canceled dial (BreakLinks) ends the wait for the answer too.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	var answer [17]byte
	n, err := io.ReadFull(c, answer[:])
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		c.Close()
		if n == 0 && errors.Is(err, io.EOF) {
			// Closed on the handshake's first byte: a member of an earlier version.
			p.legacy.mark(addr)
			return p.dial(ctx, addr, streamRaft)
		}
		return nil, fmt.Errorf("transport: raft handshake with %s: %w", addr, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	peer, peerInc := binary.BigEndian.Uint64(answer[1:9]), binary.BigEndian.Uint64(answer[9:])
	admitErr := id.Admit(peer, peerInc)
	switch {
	case answer[0] == helloRefused:
		c.Close()
		if admitErr != nil {
			return nil, admitErr
		}
		return nil, fmt.Errorf("%w (member %x at %s, incarnation %x)", ErrRefusedByPeer, peer, addr, peerInc)
	case answer[0] != helloAdmitted:
		c.Close()
		return nil, fmt.Errorf("transport: raft handshake with %s: unknown answer %q", addr, answer[0])
	case admitErr != nil:
		c.Close()
		return nil, admitErr
	}
	return c, nil
}

// acceptHello reads a dialer's handshake from br, answers it on c and
// reports whether raft traffic may flow.
func (p *PeerMux) acceptHello(c net.Conn, br *bufio.Reader) error {
	var hello [16]byte
	if _, err := io.ReadFull(br, hello[:]); err != nil {
		return fmt.Errorf("transport: raft handshake: %w", err)
	}
	peer, peerInc := binary.BigEndian.Uint64(hello[:8]), binary.BigEndian.Uint64(hello[8:])
	var self, inc uint64
	var admitErr error
	if id := p.peerIdentity(); id != nil {
		self, inc = id.Local()
		admitErr = id.Admit(peer, peerInc)
	}
	status := helloAdmitted
	if admitErr != nil {
		status = helloRefused
	}
	if _, err := c.Write(appendHello([]byte{status}, self, inc)); err != nil {
		return fmt.Errorf("transport: raft handshake answer: %w", err)
	}
	return admitErr
}

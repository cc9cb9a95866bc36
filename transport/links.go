package transport

import (
	"context"
	"net"
	"sync"

	"github.com/hashicorp/raft"
)

// RaftTransport is hashicorp/raft's network transport over a PeerMux, with
// BreakLinks.
type RaftTransport struct {
	*raft.NetworkTransport
	p *PeerMux
}

// BreakLinks closes every raft connection this member dialed to addr, and
// aborts the dials to it under way, so that each RPC waiting on one of them
// fails at once and raft sends it again on a new connection.
//
// The network transport bounds an RPC only by its I/O timeout (10 s). A
// link that lost bytes and stayed open (a proxy or firewall that
// black-holed it for a while, then let traffic through again) leaves the
// request and its answer waiting on both sides until then: the follower
// hears no heartbeat for 10 s after the link came back, has no leader, and
// serves nothing, and its replication waits as long. The leader calls this
// when a heartbeat, which a follower answers at once off its raft loop, has
// gone unanswered for an election timeout (node/replication.go).
func (t *RaftTransport) BreakLinks(addr raft.ServerAddress) { t.p.links.breakAll(string(addr)) }

// links binds each raft connection dialed to an address to that address's
// link context, which BreakLinks cancels (and the next dial replaces).
//
// Concurrency: safe for concurrent use.
type links struct {
	mu sync.Mutex
	m  map[string]*link
}

type link struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// get returns addr's current link context.
func (l *links) get(addr string) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*link{}
	}
	k := l.m[addr]
	if k == nil {
		ctx, cancel := context.WithCancel(context.Background())
		k = &link{ctx, cancel}
		l.m[addr] = k
	}
	return k.ctx
}

func (l *links) breakAll(addr string) {
	l.mu.Lock()
	k := l.m[addr]
	delete(l.m, addr)
	l.mu.Unlock()
	if k != nil {
		k.cancel()
	}
}

// bind returns c, closed when ctx (a link context) ends.
func bind(ctx context.Context, c net.Conn) net.Conn {
	return &boundConn{Conn: c, stop: context.AfterFunc(ctx, func() { c.Close() })}
}

type boundConn struct {
	net.Conn
	stop func() bool
}

func (c *boundConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

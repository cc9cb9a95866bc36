package transport

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/server"
)

// PeerClient is this member's side of the peer port: connections to the
// other members, the stream that carries forwarded writes to the leader,
// and the translation of what comes back into the request layer's typed
// errors (server.Peers). It is safe for concurrent use.
type PeerClient struct {
	peers *PeerMux
	// grace is how long calls on a stream to a former leader may still be
	// answered once this member stops sending to it.
	grace time.Duration

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // by peer address
	// legacy is when each member of an earlier version (by peer address)
	// last closed a proposal connection unanswered.
	legacy map[string]time.Time

	proposals proposalForwarder
	keepAlive kaForwarder
	open      func(ctx context.Context, addr string) (frameConn, error) // openProposals, bound once
}

var _ server.Peers = (*PeerClient)(nil)

// NewPeerClient returns the peer-port client of a member whose peer port
// is peers; grace is the election timeout.
func NewPeerClient(peers *PeerMux, grace time.Duration) *PeerClient {
	p := &PeerClient{peers: peers, grace: grace, conns: map[string]*grpc.ClientConn{}, legacy: map[string]time.Time{}}
	p.open = p.openProposals
	return p
}

// Conn returns the connection to the member whose peer address is addr.
func (p *PeerClient) Conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return p.peers.DialGRPC(ctx, a)
		}),
		// A forwarded request is bounded by --max-request-bytes; its answer
		// (a Txn's ranges) by nothing, as a client's answer is not.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(maxMsgSize)),
		grpc.WithInitialWindowSize(peerWindow), grpc.WithInitialConnWindowSize(peerWindow),
		grpc.WithConnectParams(peerConnectParams(p.grace)),
	)
	if err != nil {
		return nil, fmt.Errorf("transport: connect to member %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

// peerConnectParams bound how long a member waits on a dial to another,
// and between dials, given the election timeout. gRPC's defaults (a dial
// given 20 s, up to 2 minutes between dials) suit a client far from its
// server; between members, a dial made while the link dropped every byte
// (the TCP connect went through, the TLS handshake waited) kept a follower
// from forwarding anything to its leader for 20 s after the link came
// back. A dial is given what etcd gives its peer dials (1 s plus an
// election timeout), and dials come at most a second apart.
func peerConnectParams(electionTimeout time.Duration) grpc.ConnectParams {
	return grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: time.Second + electionTimeout,
	}
}

// peerWindow is the flow-control window of member-to-member connections,
// both ways. A window set here turns off gRPC's bandwidth estimator, which
// otherwise pings the other side on the first data it receives after each
// ping's answer: on the proposal stream, where a follower's single writes
// arrive one at a time, that was a ping and its answer per write, two more
// system calls on each member (strace, 2,000 writes through a follower:
// 7.4 writes per write on each of the two members before, 5.4 after) and
// about 5 % of the members' CPU. Peers share a LAN, and 4 MiB covers a
// forwarded request of the largest --max-request-bytes etcd allows in
// practice without waiting on the window.
const peerWindow = 4 << 20

// PeerServerOptions are the options of the peer port's gRPC server: the
// message limits of forwarded calls and peerWindow.
func PeerServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.InitialWindowSize(peerWindow), grpc.InitialConnWindowSize(peerWindow)}
}

// maxMsgSize bounds gRPC messages; request size proper is checked against
// --max-request-bytes so clients get etcd's error rather than gRPC's.
const maxMsgSize = 64 << 20

// Propose implements server.Peers over the proposal stream.
func (p *PeerClient) Propose(ctx context.Context, leader string, cmd []byte) ([]byte, uint64, error) {
	body, index, err := p.proposals.propose(ctx, p.grace, proposalTarget{key: leader, open: p.open}, cmd)
	return body, index, peerErr(err)
}

// openProposals opens a proposal stream to the member at addr: a
// connection of its own, or, to a member of an earlier version, the
// /corenode.Peer/Propose gRPC stream (proposeconn.go).
func (p *PeerClient) openProposals(ctx context.Context, addr string) (frameConn, error) {
	p.mu.Lock()
	since, legacy := p.legacy[addr]
	p.mu.Unlock()
	if !legacy || time.Since(since) > legacyRetry {
		rf, err := dialRawFrames(ctx, p.peers, addr, streamProposeReads)
		if errors.Is(err, errNoProposalConns) {
			// A leader of an earlier version that may take proposal
			// connections without reads.
			rf, err = dialRawFrames(ctx, p.peers, addr, streamPropose)
		}
		if err == nil {
			return rf, nil
		}
		if !errors.Is(err, errNoProposalConns) {
			return nil, err
		}
		p.mu.Lock()
		p.legacy[addr] = time.Now()
		p.mu.Unlock()
	}
	conn, err := p.Conn(addr)
	if err != nil {
		return nil, err
	}
	return openGRPCFrames(conn)
}

// ReadIndex implements server.Peers: the leader's read index, asked on the
// proposal stream when the leader takes reads there, else by
// /corenode.Peer/ReadIndex (a leader of an earlier version).
func (p *PeerClient) ReadIndex(ctx context.Context, leader string) (uint64, error) {
	index, ok, err := p.proposals.readIndex(ctx, p.grace, proposalTarget{key: leader, open: p.open})
	if ok {
		return index, peerErr(err)
	}
	var resp pb.StatusResponse
	if err := p.Call(ctx, leader, "/corenode.Peer/ReadIndex", &pb.StatusRequest{}, &resp); err != nil {
		return 0, err
	}
	return resp.RaftAppliedIndex, nil
}

// Call implements server.Peers.
func (p *PeerClient) Call(ctx context.Context, member, method string, req, resp any) error {
	conn, err := p.Conn(member)
	if err != nil {
		return server.ErrNotSent
	}
	return peerErr(conn.Invoke(forwarded(ctx), method, req, resp))
}

// Retire implements server.Peers.
func (p *PeerClient) Retire() { p.proposals.retire(p.grace) }

// Close drops every connection.
func (p *PeerClient) Close() {
	p.proposals.close()
	p.keepAlive.close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, c := range p.conns {
		c.Close()
		delete(p.conns, addr)
	}
}

// forwarded marks an outgoing call as forwarded by a member: the leader
// never forwards it again.
func forwarded(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
}

// peerErr turns what a forwarded call failed with into the request
// layer's typed errors: whether the member asked leads, whether the call
// certainly never left, or whether the leader could not be heard after it
// may have. gRPC says the last two only in a status's text: a call on a
// connection it could not establish fails with the dial or handshake
// error, and such a call was never written anywhere. Every other error
// (the leader's own answer) passes as it came.
func peerErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, server.ErrNotLeader) || errors.Is(err, server.ErrNotSent) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if typed, ok := fromGRPC[grpcError{st.Code(), st.Message()}]; ok {
		return typed
	}
	switch {
	case st.Code() == codes.Unavailable:
		msg := strings.ToLower(st.Message())
		if strings.Contains(msg, "while dialing") || strings.Contains(msg, "handshake failed") {
			return server.ErrNotSent
		}
		return &server.Unreachable{Err: err}
	}
	return err
}

// grpcError is a gRPC error as it travels: its code and its text.
type grpcError struct {
	code codes.Code
	msg  string
}

// fromGRPC is errTable read backwards: what the leader answered a
// forwarded call with, as the typed error it was there (the first row of
// each gRPC error), so the request layer decides on the same errors
// whether a call ran here or on the leader, and the edge sends the client
// the same gRPC error either way. Unavailable answers are left out: they
// may come from the way to the leader, not from it, and are judged
// apart.
var fromGRPC = func() map[grpcError]error {
	m := map[grpcError]error{}
	for _, e := range errTable {
		st := status.Convert(e.grpc)
		k := grpcError{st.Code(), st.Message()}
		if _, seen := m[k]; !seen && k.code != codes.Unavailable {
			m[k] = e.err
		}
	}
	return m
}()

package member

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/node"
	"github.com/corenode/corenode/transport/nameserver"
)

// DNSConfig turns on the member's DNS server (package nameserver): Addr
// HOST:PORT, empty for none (the default).
type DNSConfig struct {
	Addr   string
	Domain string        // default nameserver.DefaultDomain
	TTL    time.Duration // of every record; default 0
}

// Why a member does not answer DNS from its state.
var (
	errDNSCatchingUp = errors.New("catching up after a restart")
	errDNSNoLeader   = errors.New("no leader for longer than an election timeout")
)

// dnsState is what the name server reads: the member's applied key space,
// answered only while the member hears a leader (or lost it less than an
// election timeout ago) and holds what it had applied before a restart.
// A member cut off from the others then answers SERVFAIL, and resolvers
// move to another member, rather than serving endpoints whose leases the
// leader may have expired meanwhile; the rule is the one a watch opened
// with WithRequireLeader follows (transport's requireLeader).
type dnsState struct {
	n     *node.Node
	store *kv.Store
	grace time.Duration

	mu         sync.Mutex
	leaderless time.Time // since when the member knows no leader; zero while it knows one
}

func newDNSState(ctx context.Context, n *node.Node, grace time.Duration) *dnsState {
	s := &dnsState{n: n, store: n.Store(), grace: grace}
	s.observe()
	go s.follow(ctx)
	return s
}

// follow keeps leaderless up to date until ctx ends.
func (s *dnsState) follow(ctx context.Context) {
	for {
		// Taken before the leader is read, so no change is missed.
		changed := s.n.LeaderChange()
		s.observe()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func (s *dnsState) observe() {
	id, _ := s.n.Leader()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case id != 0:
		s.leaderless = time.Time{}
	case s.leaderless.IsZero():
		s.leaderless = time.Now()
	}
}

func (s *dnsState) Values(prefix string) ([][]byte, error) {
	select {
	case <-s.n.CaughtUp():
	default:
		return nil, errDNSCatchingUp
	}
	s.mu.Lock()
	since := s.leaderless
	s.mu.Unlock()
	if !since.IsZero() && time.Since(since) > s.grace {
		return nil, errDNSNoLeader
	}
	resp, err := s.store.Range(&pb.RangeRequest{Key: []byte(prefix), RangeEnd: prefixEnd([]byte(prefix))})
	if err != nil {
		return nil, err
	}
	values := make([][]byte, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		values[i] = kv.Value
	}
	return values, nil
}

// prefixEnd is the range end that covers every key starting with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0} // every key from prefix on
}

// startDNS starts the member's DNS server when cfg asks for one.
func (m *Member) startDNS(ctx context.Context) error {
	if m.cfg.DNS.Addr == "" {
		return nil
	}
	srv, err := nameserver.Start(nameserver.Config{Addr: m.cfg.DNS.Addr, Domain: m.cfg.DNS.Domain, TTL: m.cfg.DNS.TTL,
		Logger: m.log, Metrics: m.cfg.Metrics}, newDNSState(ctx, m.node, m.cfg.ElectionTimeout))
	if err != nil {
		return err
	}
	m.dns = srv
	return nil
}

// DNSAddr is the address the member's DNS server is bound to; "" when it
// has none.
func (m *Member) DNSAddr() string {
	if m.dns == nil {
		return ""
	}
	return m.dns.Addr()
}

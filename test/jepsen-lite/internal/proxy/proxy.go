// Package proxy is a fault-injecting TCP proxy for the members' peer links.
//
// Every member advertises a peer address where the proxy listens, and dials
// the others from its own listen IP (source-bound), so for each connection
// the proxy knows which member calls which: member i listens on
// 127.0.0.(11+i) and is advertised as 127.0.0.(21+i), same port. Between
// every pair of members the proxy can cut the link (existing connections
// reset, new ones black-holed), add latency, or make it lossy (connections
// randomly stall or reset, as TCP sees a lossy path).
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Rule is the fault on the data flowing from one member to another.
type Rule struct {
	// Cut drops the link: connections between the two members are reset and
	// new ones accepted but never forwarded (a black hole, as a partition
	// looks to TCP), until the rule is lifted.
	Cut bool
	// Delay (plus a uniform Jitter) is added to every chunk of data; order
	// is kept, as TCP keeps it.
	Delay, Jitter time.Duration
	// StallProb is the chance, per chunk, that the connection stops
	// forwarding for a random time up to MaxStall (a retransmission storm).
	StallProb float64
	MaxStall  time.Duration
	// ResetProb is the chance, per chunk, that the connection is reset.
	ResetProb float64
}

func (r Rule) zero() bool { return r == Rule{} }

// Proxy forwards peer traffic between n members.
type Proxy struct {
	n      int
	target func(i int) string
	ident  func(ip net.IP) int
	log    *slog.Logger

	mu     sync.Mutex
	rules  map[[2]int]Rule // [from, to] of the data flow
	conns  map[*link]struct{}
	lns    []net.Listener
	rng    *rand.Rand
	closed bool
	wg     sync.WaitGroup
}

// link is one proxied connection from member a (the dialer) to member b.
type link struct {
	a, b       int
	in, out    net.Conn // in: accepted from a; out: dialed to b (nil when black-holed)
	once       sync.Once
	blackholed bool
}

func (l *link) close() {
	l.once.Do(func() {
		// RST rather than FIN: a cut link looks like a reset to the member,
		// not like an orderly shutdown by its peer.
		for _, c := range []net.Conn{l.in, l.out} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			if c != nil {
				c.Close()
			}
		}
	})
}

// New starts one listener per member. listen(i) is the address the proxy
// listens on for member i ("127.0.0.21:0" picks a port), target(i) where it
// forwards to (resolved lazily, because the port of a listener chosen by the
// kernel is known only after New returns), and ident maps a connection's
// source IP to the calling member (-1: unknown, never faulted).
func New(n int, listen func(i int) string, target func(i int) string, ident func(ip net.IP) int, seed uint64, log *slog.Logger) (*Proxy, error) {
	p := &Proxy{
		n: n, target: target, ident: ident, log: log,
		rules: map[[2]int]Rule{},
		conns: map[*link]struct{}{},
		rng:   rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
	}
	for i := range n {
		ln, err := net.Listen("tcp", listen(i))
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("proxy: listen for member %d on %s: %w", i, listen(i), err)
		}
		p.lns = append(p.lns, ln)
	}
	for i, ln := range p.lns {
		p.wg.Add(1)
		go p.accept(i, ln)
	}
	return p, nil
}

// Addr is where the proxy listens for member i.
func (p *Proxy) Addr(i int) *net.TCPAddr { return p.lns[i].Addr().(*net.TCPAddr) }

// Set replaces the rule for data flowing from member `from` to member `to`.
// A cut in either direction cuts both: a TCP connection cannot live with
// one direction gone, so existing connections between the two are reset.
func (p *Proxy) Set(from, to int, r Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.zero() {
		delete(p.rules, [2]int{from, to})
	} else {
		p.rules[[2]int{from, to}] = r
	}
	if r.Cut {
		for l := range p.conns {
			if (l.a == from && l.b == to) || (l.a == to && l.b == from) {
				go l.close()
			}
		}
	}
}

// Heal lifts every rule and resets black-holed connections, so members
// redial a healed link at once instead of waiting for their I/O timeouts.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = map[[2]int]Rule{}
	for l := range p.conns {
		if l.blackholed {
			go l.close()
		}
	}
}

// Close stops the listeners and resets every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for _, ln := range p.lns {
		ln.Close()
	}
	for l := range p.conns {
		l.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

func (p *Proxy) rule(from, to int) Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rules[[2]int{from, to}]
}

func (p *Proxy) cut(a, b int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rules[[2]int{a, b}].Cut || p.rules[[2]int{b, a}].Cut
}

func (p *Proxy) float() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.Float64()
}

func (p *Proxy) randDur(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Duration(p.rng.Int64N(int64(max)))
}

func (p *Proxy) accept(to int, ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		from := -1
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			from = p.ident(a.IP)
		}
		p.wg.Add(1)
		go p.serve(from, to, c)
	}
}

func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, l)
}

func (p *Proxy) serve(from, to int, in net.Conn) {
	defer p.wg.Done()
	l := &link{a: from, b: to, in: in}
	if from >= 0 && p.cut(from, to) {
		// Hold the connection and swallow what arrives, as a dropped path
		// does: the dialer sees no error, only silence, until its timeout
		// or until Heal resets it.
		l.blackholed = true
		if !p.track(l) {
			l.close()
			return
		}
		defer p.untrack(l)
		_, _ = io.Copy(io.Discard, in)
		l.close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	var d net.Dialer
	out, err := d.DialContext(ctx, "tcp", p.target(to))
	cancel()
	if err != nil {
		// The member is down: refuse, as its closed port would.
		if tc, ok := in.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		in.Close()
		return
	}
	if tc, ok := out.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	l.out = out
	if !p.track(l) {
		l.close()
		return
	}
	defer p.untrack(l)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(l, from, to, in, out) }()
	go func() { defer wg.Done(); p.pump(l, to, from, out, in) }()
	wg.Wait()
}

type chunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst applying the rule for data from `from` to `to`.
// Reading and writing are split by a queue so that latency delays the data
// without throttling the link to one chunk per delay.
func (p *Proxy) pump(l *link, from, to int, src, dst net.Conn) {
	defer l.close()
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				l.close()
				for range q {
				}
				return
			}
		}
	}()
	defer func() { close(q); <-done }()
	var stalledUntil time.Time
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			at := time.Now()
			if from >= 0 && to >= 0 {
				r := p.rule(from, to)
				if r.Cut || p.cut(from, to) {
					l.close() // before the queue drains: a cut delivers nothing more
					return
				}
				if r.ResetProb > 0 && p.float() < r.ResetProb {
					p.log.Debug("proxy: reset", "from", from, "to", to)
					l.close()
					return
				}
				if r.StallProb > 0 && p.float() < r.StallProb {
					stalledUntil = at.Add(p.randDur(r.MaxStall))
				}
				at = at.Add(r.Delay + p.randDur(r.Jitter))
				if at.Before(stalledUntil) {
					at = stalledUntil
				}
			}
			q <- chunk{b: buf[:n], at: at}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.log.Debug("proxy: read", "from", from, "to", to, "err", err)
			}
			return
		}
	}
}

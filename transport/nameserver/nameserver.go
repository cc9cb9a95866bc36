package nameserver

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// State is the member's applied key space as the name server reads it.
// Values is called from many goroutines at once, one call per query.
type State interface {
	// Values returns the values of the keys under prefix, in key order,
	// from the state this member has applied; an error when the member
	// must not answer from its state (it has been without a leader for
	// too long, or is catching up after a restart).
	Values(prefix string) ([][]byte, error)
}

// DefaultDomain is the zone answered when Config.Domain is empty.
const DefaultDomain = "corenode."

// Config configures a Server.
type Config struct {
	// Addr is HOST:PORT to serve on, over UDP and TCP (port 0: one the
	// kernel picks, the same for both).
	Addr string
	// Domain is the zone answered (default DefaultDomain): services are
	// SERVICE.service.DOMAIN.
	Domain string
	// TTL of every record; zero (the default) asks resolvers not to cache,
	// so an endpoint removed from the cluster is gone from the next answer.
	TTL time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Metrics registers the server's series; nil registers none.
	Metrics prometheus.Registerer
}

// Server is a running DNS server.
type Server struct {
	records recordCache
	cfg     Config
	state   State
	domain  string // canonical, with the trailing dot
	ttl     uint32
	metrics *metrics
	log     *slog.Logger
	udp     *dns.Server
	tcp     *dns.Server
	addr    string
	wg      sync.WaitGroup
}

// Start binds cfg.Addr over UDP and TCP and serves queries from state until
// Close.
func Start(cfg Config, state State) (*Server, error) {
	if cfg.Domain == "" {
		cfg.Domain = DefaultDomain
	}
	if _, ok := dns.IsDomainName(cfg.Domain); !ok || cfg.Domain == "." {
		return nil, fmt.Errorf("nameserver: %q is not a domain name", cfg.Domain)
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("nameserver: TTL %v is negative", cfg.TTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, state: state, domain: dns.CanonicalName(cfg.Domain), ttl: uint32(cfg.TTL / time.Second),
		metrics: newMetrics(cfg.Metrics), log: cfg.Logger}
	pc, ln, err := listen(cfg.Addr)
	if err != nil {
		return nil, err
	}
	s.addr = pc.LocalAddr().String()
	s.udp = &dns.Server{PacketConn: pc, Handler: s}
	s.tcp = &dns.Server{Listener: ln, Handler: s, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			errc <- srv.ActivateAndServe()
		}()
		select {
		case <-started:
		case err := <-errc:
			s.Close()
			return nil, fmt.Errorf("nameserver: serve on %s: %w", s.addr, err)
		}
	}
	s.log.Info("serving DNS", "addr", s.addr, "domain", s.domain, "ttl", cfg.TTL)
	return s, nil
}

// listen binds addr over UDP and TCP. With port 0, TCP takes the port the
// kernel gave UDP, so that one address serves both; when another program
// holds that port over TCP, it tries again with another.
func listen(addr string) (net.PacketConn, net.Listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("nameserver: %w", err)
	}
	for attempt := 1; ; attempt++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("nameserver: listen on %s/udp: %w", addr, err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if port != "0" || attempt == 10 {
			return nil, nil, fmt.Errorf("nameserver: listen on %s/tcp: %w", pc.LocalAddr(), err)
		}
	}
}

// Addr is the address served, over UDP and TCP.
func (s *Server) Addr() string { return s.addr }

// Close stops serving and waits for the servers to end.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var errs []error
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		if srv != nil {
			if err := srv.ShutdownContext(ctx); err != nil && !strings.Contains(err.Error(), "not started") {
				errs = append(errs, err)
			}
		}
	}
	s.wg.Wait()
	return errors.Join(errs...)
}

// ServeDNS answers one query.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := s.answer(r)
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(max(opt.UDPSize(), dns.MinMsgSize), false)
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil {
			size = max(int(opt.UDPSize()), dns.MinMsgSize)
		}
		// Sets TC when records were left out, so the client asks over TCP.
		m.Truncate(size)
	}
	s.metrics.responses.WithLabelValues(dns.RcodeToString[m.Rcode]).Inc()
	s.metrics.answers.Add(float64(len(m.Answer)))
	if err := w.WriteMsg(m); err != nil {
		s.log.Debug("DNS answer not sent", "remote", w.RemoteAddr().String(), "err", err)
	}
}

// answer builds the reply to r.
func (s *Server) answer(r *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	if r.Opcode != dns.OpcodeQuery {
		s.metrics.queries.WithLabelValues("other").Inc()
		m.SetRcode(r, dns.RcodeNotImplemented)
		return m
	}
	if len(r.Question) != 1 {
		s.metrics.queries.WithLabelValues("other").Inc()
		m.SetRcode(r, dns.RcodeFormatError)
		return m
	}
	q := r.Question[0]
	s.metrics.queries.WithLabelValues(qtypeLabel(q.Qtype)).Inc()
	name := dns.CanonicalName(q.Name)
	if q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY || !dns.IsSubDomain(s.domain, name) {
		// Not this server's zone: it answers nothing else, and does not
		// recurse.
		m.Authoritative = false
		m.SetRcode(r, dns.RcodeRefused)
		return m
	}
	labels := dns.SplitDomainName(strings.TrimSuffix(name, s.domain))
	switch {
	case len(labels) == 0:
		if q.Qtype == dns.TypeSOA || q.Qtype == dns.TypeANY {
			m.Answer = append(m.Answer, s.soa())
		} else {
			m.Ns = append(m.Ns, s.soa())
		}
	case len(labels) == 2 && labels[1] == "addr":
		s.answerAddr(m, q, labels[0])
	case len(labels) >= 2 && labels[len(labels)-1] == "service":
		s.answerService(m, q, serviceName(labels[:len(labels)-1]))
	default:
		s.nxdomain(m)
	}
	return m
}

// serviceName is the service a query names: SERVICE.service.DOMAIN (the
// labels joined with dots) or, as RFC 2782 spells it and as resolvers'
// SRV lookups ask, _SERVICE._PROTO.service.DOMAIN.
func serviceName(labels []string) string {
	if len(labels) == 2 && strings.HasPrefix(labels[0], "_") && (labels[1] == "_tcp" || labels[1] == "_udp") {
		return labels[0][1:]
	}
	return strings.Join(labels, ".")
}

func (s *Server) answerService(m *dns.Msg, q dns.Question, service string) {
	values, err := s.state.Values(service + "/")
	if err != nil {
		s.log.Debug("DNS query not answered from this member's state", "service", service, "err", err)
		m.Rcode = dns.RcodeServerFailure
		return
	}
	var eps []endpoint
	for _, v := range values {
		if ep, ok := s.records.decode(v); ok {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		s.nxdomain(m)
		return
	}
	seen := map[string]bool{}
	for _, ep := range eps {
		switch q.Qtype {
		case dns.TypeSRV, dns.TypeANY:
			if ep.port < 0 {
				continue
			}
			target := dns.Fqdn(ep.host)
			if ep.ip != nil {
				target = addrName(ep.ip) + ".addr." + s.domain
				if !seen[target] {
					seen[target] = true
					m.Extra = append(m.Extra, s.addrRecord(target, ep.ip))
				}
			}
			m.Answer = append(m.Answer, &dns.SRV{Hdr: s.header(q.Name, dns.TypeSRV), Priority: 1, Weight: 1,
				Port: uint16(ep.port), Target: target})
		case dns.TypeA, dns.TypeAAAA:
			if ep.ip == nil || (ep.ip.To4() != nil) != (q.Qtype == dns.TypeA) || seen[ep.ip.String()] {
				continue
			}
			seen[ep.ip.String()] = true
			m.Answer = append(m.Answer, s.addrRecord(q.Name, ep.ip))
		}
	}
	if len(m.Answer) == 0 {
		m.Ns = append(m.Ns, s.soa()) // the name exists, with no record of this type
	}
}

// answerAddr answers HEX.addr.DOMAIN, the SRV targets of IP endpoints.
func (s *Server) answerAddr(m *dns.Msg, q dns.Question, label string) {
	b, err := hex.DecodeString(label)
	if err != nil || (len(b) != net.IPv4len && len(b) != net.IPv6len) {
		s.nxdomain(m)
		return
	}
	v4 := len(b) == net.IPv4len
	if q.Qtype == dns.TypeANY || v4 && q.Qtype == dns.TypeA || !v4 && q.Qtype == dns.TypeAAAA {
		m.Answer = append(m.Answer, s.addrRecord(q.Name, net.IP(b)))
		return
	}
	m.Ns = append(m.Ns, s.soa())
}

// addrName is the label an IP endpoint's SRV target gets: its bytes in hex,
// as Consul names them.
func addrName(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return hex.EncodeToString(ip)
}

func (s *Server) addrRecord(name string, ip net.IP) dns.RR {
	if v4 := ip.To4(); v4 != nil {
		return &dns.A{Hdr: s.header(name, dns.TypeA), A: v4}
	}
	return &dns.AAAA{Hdr: s.header(name, dns.TypeAAAA), AAAA: ip}
}

func (s *Server) header(name string, rrtype uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: rrtype, Class: dns.ClassINET, Ttl: s.ttl}
}

// soa is the zone's SOA record; its minimum TTL is the records' TTL, so
// resolvers cache "no such service" no longer than an answer.
func (s *Server) soa() dns.RR {
	return &dns.SOA{Hdr: s.header(s.domain, dns.TypeSOA), Ns: "ns." + s.domain, Mbox: "hostmaster." + s.domain,
		Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: s.ttl}
}

func (s *Server) nxdomain(m *dns.Msg) {
	m.Rcode = dns.RcodeNameError
	m.Ns = append(m.Ns, s.soa())
}

// endpoint is one registered address: host and port (-1 when the address
// has none), and ip when the host is an IP address.
type endpoint struct {
	host string
	port int
	ip   net.IP
}

// decode reads an endpoint record as etcd's naming/endpoints.Manager
// stores it ({"Op":0,"Addr":"host:port","Metadata":...}); records that do
// not decode are skipped, as etcd's resolver skips them.
func decode(value []byte) (endpoint, bool) {
	var rec struct{ Addr string }
	if err := json.Unmarshal(value, &rec); err != nil || rec.Addr == "" {
		return endpoint{}, false
	}
	ep := endpoint{host: rec.Addr, port: -1}
	if host, port, err := net.SplitHostPort(rec.Addr); err == nil {
		if p, err := strconv.ParseUint(port, 10, 16); err == nil {
			ep.host, ep.port = host, int(p)
		}
	}
	ep.ip = net.ParseIP(ep.host)
	if ep.ip == nil {
		if _, ok := dns.IsDomainName(ep.host); !ok {
			return endpoint{}, false
		}
	}
	return ep, true
}

// recordCache remembers decoded endpoint records by their bytes: a record
// is decoded once, not once per query (decoding JSON was a quarter of a
// query's cost). Records change only when re-registered, so the cache is
// simply emptied when it grows past maxCachedRecords.
type recordCache struct {
	mu sync.RWMutex
	m  map[string]cachedRecord
}

type cachedRecord struct {
	ep endpoint
	ok bool
}

const maxCachedRecords = 1 << 16

func (c *recordCache) decode(value []byte) (endpoint, bool) {
	c.mu.RLock()
	r, hit := c.m[string(value)]
	c.mu.RUnlock()
	if hit {
		return r.ep, r.ok
	}
	ep, ok := decode(value)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedRecords {
		c.m = make(map[string]cachedRecord)
	}
	c.m[string(value)] = cachedRecord{ep, ok}
	c.mu.Unlock()
	return ep, ok
}

func qtypeLabel(t uint16) string {
	switch t {
	case dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeSOA, dns.TypeANY:
		return dns.TypeToString[t]
	}
	return "other"
}

type metrics struct {
	queries   *prometheus.CounterVec
	responses *prometheus.CounterVec
	answers   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corenode_dns_queries_total",
			Help: "DNS queries received, by type (A, AAAA, SRV, SOA, ANY, other)."}, []string{"type"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corenode_dns_responses_total",
			Help: "DNS responses sent, by rcode (NOERROR, NXDOMAIN, SERVFAIL, REFUSED, ...)."}, []string{"rcode"}),
		answers: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_dns_answer_records_total",
			Help: "Records sent in answer sections."}),
	}
	if reg != nil {
		reg.MustRegister(m.queries, m.responses, m.answers)
	}
	return m
}

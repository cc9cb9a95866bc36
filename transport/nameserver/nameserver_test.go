package nameserver

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/corenode/corenode/internal/testenv"
)

// fakeState is a key space held in a map.
type fakeState struct {
	mu   sync.Mutex
	kvs  map[string]string
	fail error
}

func (f *fakeState) Values(prefix string) ([][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	var keys []string
	for k := range f.kvs {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out [][]byte
	for _, k := range keys {
		out = append(out, []byte(f.kvs[k]))
	}
	return out, nil
}

func (f *fakeState) put(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kvs["web/"+addr] = fmt.Sprintf(`{"Op":0,"Addr":%q,"Metadata":null}`, addr)
}

func start(t *testing.T, cfg Config, st State) *Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	s, err := Start(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func query(t *testing.T, s *Server, name string, qtype uint16, net string) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: net, Timeout: 5 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	r, _, err := c.Exchange(m, s.Addr())
	if err != nil {
		t.Fatalf("%s %s over %s: %v", dns.TypeToString[qtype], name, net, err)
	}
	return r
}

// records is the answer section as "TYPE data" strings, sorted.
func records(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		h := rr.Header()
		out = append(out, fmt.Sprintf("%s %s %d %s", h.Name, dns.TypeToString[h.Rrtype], h.Ttl, strings.TrimPrefix(rr.String(), h.String())))
	}
	slices.Sort(out)
	return out
}

func TestAnswers(t *testing.T) {
	st := &fakeState{kvs: map[string]string{
		"other/10.9.9.9:1": `{"Op":0,"Addr":"10.9.9.9:1"}`,
		"web/garbage":      `not json`,
	}}
	for _, a := range []string{"10.0.0.7:8080", "10.0.0.8:8080", "10.0.0.8:9090", "[2001:db8::1]:443", "db.example.com:5432", "10.0.0.9"} {
		st.put(a)
	}
	reg := prometheus.NewRegistry()
	s := start(t, Config{Metrics: reg}, st)
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		want  []string
	}{
		{"web.service.corenode.", dns.TypeSRV, dns.RcodeSuccess, []string{
			"web.service.corenode. SRV 0 1 1 443 20010db8000000000000000000000001.addr.corenode.",
			"web.service.corenode. SRV 0 1 1 5432 db.example.com.",
			"web.service.corenode. SRV 0 1 1 8080 0a000007.addr.corenode.",
			"web.service.corenode. SRV 0 1 1 8080 0a000008.addr.corenode.",
			"web.service.corenode. SRV 0 1 1 9090 0a000008.addr.corenode.",
		}},
		// As Go's net.LookupSRV("web", "tcp", "service.corenode") asks.
		{"_web._tcp.service.corenode.", dns.TypeSRV, dns.RcodeSuccess, nil},
		{"web.service.corenode.", dns.TypeA, dns.RcodeSuccess, []string{
			"web.service.corenode. A 0 10.0.0.7", "web.service.corenode. A 0 10.0.0.8", "web.service.corenode. A 0 10.0.0.9"}},
		{"WEB.Service.CoreNode.", dns.TypeA, dns.RcodeSuccess, []string{
			"WEB.Service.CoreNode. A 0 10.0.0.7", "WEB.Service.CoreNode. A 0 10.0.0.8", "WEB.Service.CoreNode. A 0 10.0.0.9"}},
		{"web.service.corenode.", dns.TypeAAAA, dns.RcodeSuccess, []string{"web.service.corenode. AAAA 0 2001:db8::1"}},
		{"web.service.corenode.", dns.TypeTXT, dns.RcodeSuccess, []string{}},
		{"0a000007.addr.corenode.", dns.TypeA, dns.RcodeSuccess, []string{"0a000007.addr.corenode. A 0 10.0.0.7"}},
		{"0a000007.addr.corenode.", dns.TypeAAAA, dns.RcodeSuccess, []string{}},
		{"zz.addr.corenode.", dns.TypeA, dns.RcodeNameError, []string{}},
		{"nope.service.corenode.", dns.TypeSRV, dns.RcodeNameError, []string{}},
		{"service.corenode.", dns.TypeSRV, dns.RcodeNameError, []string{}},
		{"corenode.", dns.TypeSOA, dns.RcodeSuccess, []string{"corenode. SOA 0 ns.corenode. hostmaster.corenode. 1 3600 600 86400 0"}},
		{"example.com.", dns.TypeA, dns.RcodeRefused, []string{}},
	} {
		for _, network := range []string{"udp", "tcp"} {
			r := query(t, s, tc.name, tc.qtype, network)
			if r.Rcode != tc.rcode {
				t.Errorf("%s %s over %s: rcode %s, want %s", dns.TypeToString[tc.qtype], tc.name, network, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
				continue
			}
			got := records(r.Answer)
			if tc.want == nil { // the same as the SRV query above, by another name
				if len(got) != 5 {
					t.Errorf("%s %s over %s: %q, want the 5 SRV records", dns.TypeToString[tc.qtype], tc.name, network, got)
				}
				continue
			}
			if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("%s %s over %s:\n got %q\nwant %q", dns.TypeToString[tc.qtype], tc.name, network, got, tc.want)
			}
			if r.Rcode != dns.RcodeRefused && len(r.Answer) == 0 && (len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA) {
				t.Errorf("%s %s over %s: no answer and authority %v, want the zone's SOA for negative caching", dns.TypeToString[tc.qtype], tc.name, network, r.Ns)
			}
		}
	}
	r := query(t, s, "web.service.corenode.", dns.TypeSRV, "udp")
	if got := records(r.Extra); !slices.Equal(got, []string{
		"0a000007.addr.corenode. A 0 10.0.0.7", "0a000008.addr.corenode. A 0 10.0.0.8",
		"20010db8000000000000000000000001.addr.corenode. AAAA 0 2001:db8::1"}) {
		t.Errorf("SRV additional section %q, want one address record per IP target", got)
	}
	if !r.Authoritative {
		t.Error("answer not authoritative")
	}
	if got := testutil.ToFloat64(s.metrics.responses.WithLabelValues("NXDOMAIN")); got != 6 {
		t.Errorf("corenode_dns_responses_total{rcode=NXDOMAIN} = %v, want 6", got)
	}
	if got := testutil.ToFloat64(s.metrics.queries.WithLabelValues("SRV")); got != 9 {
		t.Errorf("corenode_dns_queries_total{type=SRV} = %v, want 9", got)
	}

	st.mu.Lock()
	st.fail = errors.New("no leader")
	st.mu.Unlock()
	if r := query(t, s, "web.service.corenode.", dns.TypeSRV, "udp"); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("state that cannot answer: rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
}

// TestTruncatesOverUDP: an answer too big for a UDP datagram is cut and
// flagged, and the same query over TCP gets every record.
func TestTruncatesOverUDP(t *testing.T) {
	st := &fakeState{kvs: map[string]string{}}
	for i := range 100 {
		st.put(fmt.Sprintf("10.1.%d.%d:8080", i/250, i%250+1))
	}
	s := start(t, Config{Domain: "example.internal", TTL: 5 * time.Second}, st)
	udp := query(t, s, "web.service.example.internal.", dns.TypeSRV, "udp")
	if !udp.Truncated || len(udp.Answer) >= 100 {
		t.Errorf("over UDP: truncated %v with %d answers, want TC and fewer than 100", udp.Truncated, len(udp.Answer))
	}
	tcp := query(t, s, "web.service.example.internal.", dns.TypeSRV, "tcp")
	if tcp.Truncated || len(tcp.Answer) != 100 || tcp.Answer[0].Header().Ttl != 5 {
		t.Errorf("over TCP: truncated %v, %d answers (TTL %d), want all 100 with TTL 5", tcp.Truncated, len(tcp.Answer), tcp.Answer[0].Header().Ttl)
	}
}

// TestDig: Debian's dig, the client a user types, reads the answers.
func TestDig(t *testing.T) {
	testenv.RequireCommand(t, "dig", "apt-get install bind9-dnsutils (scripts/test does)")
	st := &fakeState{kvs: map[string]string{}}
	st.put("10.0.0.7:8080")
	s := start(t, Config{}, st)
	host, port, _ := net.SplitHostPort(s.Addr())
	dig := func(args ...string) string {
		out, err := exec.Command("dig", append([]string{"@" + host, "-p", port, "+time=2", "+tries=1"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := dig("+short", "SRV", "web.service.corenode."); strings.TrimSpace(out) != "1 1 8080 0a000007.addr.corenode." {
		t.Errorf("dig +short SRV: %q", out)
	}
	if out := dig("+short", "web.service.corenode."); strings.TrimSpace(out) != "10.0.0.7" {
		t.Errorf("dig +short A: %q", out)
	}
	if out := dig("+tcp", "+short", "SRV", "_web._tcp.service.corenode."); strings.TrimSpace(out) != "1 1 8080 0a000007.addr.corenode." {
		t.Errorf("dig +tcp SRV _web._tcp: %q", out)
	}
	if out := dig("SRV", "nope.service.corenode."); !strings.Contains(out, "status: NXDOMAIN") {
		t.Errorf("dig of an unknown service:\n%s", out)
	}
}

package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/member/membertest"
)

// The TestDeploy tests start a 3-member cluster the ways real deployments
// start etcd, and check that it serves as those deployments expect:
// kubeadm's static-pod command line, the same settings as ETCD_* variables
// only, and etcd's YAML --config-file only. Each member has mTLS on its
// client and peer ports and serves /metrics on a URL of its own. The same
// tests run against etcd with CORENODE_E2E_BINARY pointing at etcd 3.6.

// nodeIP is the node's address in kubeadm's flags. kubeadm listens for
// clients on https://127.0.0.1:2379 and on the node's address, so the two
// must differ (one address twice would not bind); on Linux all of
// 127.0.0.0/8 is loopback.
const nodeIP = "127.0.0.2"

// progressInterval is kubeadm's --experimental-watch-progress-notify-interval.
const progressInterval = 5 * time.Second

// TestDeployKubeadmFlags starts each member with exactly the flags
// kubeadm's etcd static pod has, in kubeadm's (sorted) order.
func TestDeployKubeadmFlags(t *testing.T) {
	c, p := startDeployCluster(t, func(c *cluster, p *deployPKI, m *member) ([]string, []string) {
		var args []string
		for _, s := range kubeadmSettings(c, p, m) {
			args = append(args, "--"+s[0]+"="+s[1])
		}
		return args, nil
	})
	checkDeployCluster(t, c, p)
}

// TestDeployEnv gives each member kubeadm's settings as ETCD_* variables
// only, no command-line argument (cluster.start passes on none of the
// test's own CORENODE_* or ETCD_* variables).
func TestDeployEnv(t *testing.T) {
	// Either, passed on, would make the members something else.
	t.Setenv("CORENODE_NAME", "leaked-from-the-test")
	t.Setenv("ETCD_INITIAL_CLUSTER_STATE", "existing")
	c, p := startDeployCluster(t, func(c *cluster, p *deployPKI, m *member) ([]string, []string) {
		var env []string
		for _, s := range kubeadmSettings(c, p, m) {
			env = append(env, "ETCD_"+strings.ToUpper(strings.ReplaceAll(s[0], "-", "_"))+"="+s[1])
		}
		return nil, env
	})
	checkDeployCluster(t, c, p)
}

// TestDeployConfigFile gives each member only --config-file: a YAML file
// written as etcd's etcd.conf.yml.sample documents one, every key of the
// sample kept (quoted strings, empty values, flow lists, the TLS
// sections), with kubeadm's member settings in it, its two experimental
// ones under etcd 3.6's names (a feature gate, and a duration as etcd
// decodes one from the file: a number of nanoseconds).
func TestDeployConfigFile(t *testing.T) {
	c, p := startDeployCluster(t, func(c *cluster, p *deployPKI, m *member) ([]string, []string) {
		file := filepath.Join(filepath.Dir(m.dataDir), m.name+".conf.yml")
		if err := os.WriteFile(file, []byte(etcdConfigFile(c, p, m)), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"--config-file=" + file}, nil
	})
	checkDeployCluster(t, c, p)
}

// deployPKI is what kubeadm makes for etcd: one CA, a server and a peer
// certificate for each member (valid for localhost, 127.0.0.1 and the
// node's address), and the health-check client certificate.
type deployPKI struct {
	ca           *membertest.CA
	server, peer map[string]membertest.Pair // by member name
	client       membertest.Pair
}

func newDeployPKI(t *testing.T) *deployPKI {
	ca := membertest.NewCA(t, "etcd-ca")
	return &deployPKI{ca: ca, server: map[string]membertest.Pair{}, peer: map[string]membertest.Pair{},
		client: ca.Issue("kube-etcd-healthcheck-client")}
}

// issue makes m's server and peer certificates, once.
func (p *deployPKI) issue(m *member) {
	if _, ok := p.server[m.name]; ok {
		return
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(nodeIP), net.IPv6loopback}
	p.server[m.name] = p.ca.Issue(m.name+"-server", ips...)
	p.peer[m.name] = p.ca.Issue(m.name+"-peer", ips...)
}

// ctlFlags make etcdctl trust the CA and present the client certificate.
func (p *deployPKI) ctlFlags() []string {
	return []string{"--cacert=" + p.ca.File, "--cert=" + p.client.CertFile, "--key=" + p.client.KeyFile}
}

// startDeployCluster starts 3 members on https client and peer URLs at
// nodeIP, each with a metrics URL, launched by launch, and waits until
// each is healthy through etcdctl with the client certificate.
func startDeployCluster(t *testing.T, launch func(c *cluster, p *deployPKI, m *member) (args, env []string)) (*cluster, *deployPKI) {
	t.Helper()
	requireEtcdctl(t)
	bin := buildBinary(t)
	p := newDeployPKI(t)
	begin := time.Now()
	c := startClusterWith(t, bin, func(c *cluster) {
		metrics := freePorts(t, len(c.members))
		for i, m := range c.members {
			m.clientURL = strings.Replace(m.clientURL, "http://127.0.0.1:", "https://"+nodeIP+":", 1)
			m.peerURL = strings.Replace(m.peerURL, "http://127.0.0.1:", "https://"+nodeIP+":", 1)
			m.metricsURL = fmt.Sprintf("http://127.0.0.1:%d", metrics[i])
			p.issue(m)
		}
		c.ctlFlags = p.ctlFlags()
		c.launch = func(m *member) ([]string, []string) { return launch(c, p, m) }
	})
	t.Logf("3 members healthy %v after the first start", time.Since(begin).Round(time.Millisecond))
	return c, p
}

// loopbackURL is m's client URL on 127.0.0.1, where kube-apiserver reaches
// a stacked etcd.
func loopbackURL(m *member) string {
	return strings.Replace(m.clientURL, "https://"+nodeIP+":", "https://127.0.0.1:", 1)
}

// kubeadmSettings are the flags kubeadm writes into etcd's static pod
// (kubeadm's etcd.go, GetEtcdPodSpec), by name, in kubeadm's order.
func kubeadmSettings(c *cluster, p *deployPKI, m *member) [][2]string {
	return [][2]string{
		{"advertise-client-urls", m.clientURL},
		{"cert-file", p.server[m.name].CertFile},
		{"client-cert-auth", "true"},
		{"data-dir", m.dataDir},
		{"experimental-initial-corrupt-check", "true"},
		{"experimental-watch-progress-notify-interval", progressInterval.String()},
		{"initial-advertise-peer-urls", m.peerURL},
		{"initial-cluster", c.initialCluster()},
		{"key-file", p.server[m.name].KeyFile},
		{"listen-client-urls", loopbackURL(m) + "," + m.clientURL},
		{"listen-metrics-urls", m.metricsURL},
		{"listen-peer-urls", m.peerURL},
		{"name", m.name},
		{"peer-cert-file", p.peer[m.name].CertFile},
		{"peer-client-cert-auth", "true"},
		{"peer-key-file", p.peer[m.name].KeyFile},
		{"peer-trusted-ca-file", p.ca.File},
		{"snapshot-count", "10000"},
		{"trusted-ca-file", p.ca.File},
	}
}

// etcdConfigFile is m's etcd YAML configuration: the keys of etcd 3.6's
// etcd.conf.yml.sample in its order and style, the sample's defaults
// where kubeadm sets nothing, then the keys kubeadm's flags add.
func etcdConfigFile(c *cluster, p *deployPKI, m *member) string {
	return fmt.Sprintf(`name: '%[1]s'
data-dir: %[2]s
wal-dir:
snapshot-count: 10000
heartbeat-interval: 100
election-timeout: 1000
quota-backend-bytes: 0
listen-peer-urls: %[3]s
listen-client-urls: %[4]s,%[5]s
max-snapshots: 5
max-wals: 5
cors:
initial-advertise-peer-urls: %[3]s
advertise-client-urls: %[5]s
discovery:
discovery-fallback: 'proxy'
discovery-proxy:
discovery-srv:
initial-cluster: "%[6]s"
initial-cluster-token: 'etcd-cluster'
initial-cluster-state: 'new'
strict-reconfig-check: false
enable-pprof: true
proxy: 'off'
proxy-failure-wait: 5000
proxy-refresh-interval: 30000
proxy-dial-timeout: 1000
proxy-write-timeout: 5000
proxy-read-timeout: 0

client-transport-security:
  cert-file: %[7]s
  key-file: %[8]s
  client-cert-auth: true
  trusted-ca-file: %[9]s
  auto-tls: false

peer-transport-security:
  cert-file: %[10]s
  key-file: %[11]s
  client-cert-auth: true
  trusted-ca-file: %[9]s
  auto-tls: false

self-signed-cert-validity: 1
log-level: debug
logger: zap
log-outputs: [stderr]
force-new-cluster: false
auto-compaction-mode: periodic
auto-compaction-retention: "1"
cipher-suites: [
  TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
  TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
]
tls-min-version: 'TLS1.2'
tls-max-version: 'TLS1.3'

listen-metrics-urls: %[12]s
feature-gates: InitialCorruptCheck=true
watch-progress-notify-interval: %[13]d
`, m.name, m.dataDir, m.peerURL, loopbackURL(m), m.clientURL, c.initialCluster(),
		p.server[m.name].CertFile, p.server[m.name].KeyFile, p.ca.File,
		p.peer[m.name].CertFile, p.peer[m.name].KeyFile, m.metricsURL, progressInterval.Nanoseconds())
}

// checkDeployCluster checks what a deployment relies on: one leader, reads
// and writes through every member and both of its client addresses with
// the client certificate, no service without one on the client and peer
// ports, /metrics and the kubelet's probes on each metrics URL, the data
// in the data dir given, and kubeadm's two experimental settings in
// effect (a member restarted on its data runs the initial corruption
// check; watch progress notifications come every 5 s, not etcd's default
// 10 minutes).
func checkDeployCluster(t *testing.T, c *cluster, p *deployPKI) {
	eps := c.endpoints()
	tlsFlags := p.ctlFlags()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The watch is on a member the test does not restart.
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps[1:2], DialTimeout: 5 * time.Second,
		TLS: p.ca.ClientConfig(p.client), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	watched := time.Now()
	progress := make(chan time.Duration, 1) // when the first progress notification came
	go func() {
		for resp := range cli.Watch(ctx, "/deploy/progress", clientv3.WithProgressNotify()) {
			if resp.IsProgressNotify() {
				progress <- time.Since(watched)
				return
			}
		}
		close(progress)
	}()

	res := ctl(eps, "", append(slices.Clone(tlsFlags), "endpoint", "health", "--cluster")...)
	if n := strings.Count(res.stdout+res.stderr, "is healthy"); res.err != nil || n != len(eps) {
		t.Errorf("endpoint health --cluster: want %d healthy endpoints, got %d: %v", len(eps), n, res)
	}
	st := decodeJSON[[]endpointStatus](t, "endpoint status --cluster",
		mustCtl(t, eps[:1], append(slices.Clone(tlsFlags), "endpoint", "status", "--cluster", "-w", "json")...))
	if len(st) != len(c.members) {
		t.Errorf("endpoint status --cluster: want %d members, got %+v", len(c.members), st)
	}
	if _, leader, err := leaderOf(c, st); err != nil {
		t.Error(err)
	} else {
		t.Logf("leader is %s", leader.name)
	}

	// A key written through each member, read through each member's other
	// address (where kube-apiserver reads a stacked etcd).
	var want []string
	for _, m := range c.members {
		mustCtl(t, []string{m.clientURL}, append(slices.Clone(tlsFlags), "put", "/deploy/"+m.name, "via "+m.name)...)
		want = append(want, "/deploy/"+m.name, "via "+m.name)
	}
	for _, m := range c.members {
		expectOutput(t, []string{loopbackURL(m)}, strings.Join(want, "\n"), append(slices.Clone(tlsFlags), "get", "/deploy/", "--prefix")...)
	}

	// mTLS: without a certificate neither port serves; with one the same
	// connection is kept (the check's own control).
	refused := ctl(eps, "", "--cacert="+p.ca.File, "--command-timeout=2s", "put", "/deploy/no-cert", "x")
	if refused.err == nil {
		t.Errorf("etcdctl with no client certificate wrote: %v", refused)
	}
	expectOutput(t, eps, "", append(slices.Clone(tlsFlags), "get", "/deploy/no-cert")...)
	for _, m := range c.members {
		for _, port := range []struct{ what, url string }{{"client", loopbackURL(m)}, {"client", m.clientURL}, {"peer", m.peerURL}} {
			addr := hostPort(t, port.url)
			if err := tlsRead(addr, p.ca.ClientConfig(membertest.Pair{})); err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("%s's %s port %s, TLS without a client certificate: want a certificate error, got %v", m.name, port.what, addr, err)
			}
			pair := p.client
			if port.what == "peer" {
				pair = p.peer[m.name]
			}
			if err := tlsRead(addr, p.ca.ClientConfig(pair)); err != nil {
				t.Errorf("%s's %s port %s, TLS with a certificate: %v", m.name, port.what, addr, err)
			}
		}
	}

	for _, m := range c.members {
		checkMetricsURL(t, m)
		if entries, err := os.ReadDir(m.dataDir); err != nil || len(entries) == 0 {
			t.Errorf("%s's data dir %s: %d entries, %v", m.name, m.dataDir, len(entries), err)
		}
	}

	// etcd checks a member that restarts on its data (a new one has
	// nothing to compare), as a static pod's member restarts.
	m := c.members[0]
	c.kill(m)
	logged := logSize(t, m)
	if err := c.start(m); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy([]*member{m}, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	for !logSince(t, m, logged, "initial corruption checking passed") {
		if ctx.Err() != nil || !m.running() {
			t.Fatalf("%s, restarted, never logged that its initial corruption check passed (running=%v)", m.name, m.running())
		}
		time.Sleep(100 * time.Millisecond)
	}
	expectOutput(t, []string{m.clientURL}, strings.Join(want, "\n"), append(slices.Clone(tlsFlags), "get", "/deploy/", "--prefix")...)

	// Not within the interval: etcd ticks it from when the watch stream
	// opens, which can be a little after the Watch call.
	limit := progressInterval + 3*time.Second
	timer := time.NewTimer(time.Until(watched.Add(limit)))
	defer timer.Stop()
	var after time.Duration
	var ok bool
	select {
	case after, ok = <-progress:
	case <-timer.C:
		select {
		case after, ok = <-progress: // it came in time, the checks above took longer
		default:
			t.Fatalf("no watch progress notification within %v; the interval is %v", limit, progressInterval)
		}
	}
	if !ok {
		t.Fatalf("the watch ended before a progress notification (%v)", ctx.Err())
	}
	if after > limit {
		t.Errorf("the first watch progress notification came %v after the watch began; the interval is %v", after, progressInterval)
	}
	t.Logf("watch progress notification %v after the watch began", after.Round(time.Millisecond))
}

func hostPort(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Host
}

// tlsRead connects to addr with cfg and reads. A server that requires a
// client certificate ends a connection without one with an alert, which
// TLS 1.3 sends after the client has finished its handshake, so the read
// returns it. A connection the server keeps is nil: the read times out or
// returns the server's first bytes.
func tlsRead(addr string, cfg *tls.Config) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = conn.Read(make([]byte, 1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return err
}

// checkMetricsURL asks m's metrics URL what a Prometheus server and the
// kubelet ask etcd's: /metrics for Prometheus text naming corenode's
// series (or etcd's, when the binary is etcd), and the probes of kubeadm's
// static pod, which want a 200 (/livez and /readyz since Kubernetes 1.28,
// /health before).
func checkMetricsURL(t *testing.T, m *member) {
	t.Helper()
	client := http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/metrics", "/livez", "/readyz", "/health?exclude=NOSPACE&serializable=true", "/health?serializable=false"} {
		resp, err := client.Get(m.metricsURL + path)
		if err != nil {
			t.Errorf("%s: GET %s: %v", m.name, path, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s: GET %s%s: %d %v, want 200:\n%.300s", m.name, m.metricsURL, path, resp.StatusCode, err, body)
			continue
		}
		ctype := resp.Header.Get("Content-Type")
		if path == "/metrics" && (!strings.HasPrefix(ctype, "text/plain") ||
			!(strings.Contains(string(body), "\n# TYPE corenode_") || strings.Contains(string(body), "\n# TYPE etcd_"))) {
			t.Errorf("%s: GET %s/metrics: %s, want Prometheus text with corenode_ or etcd_ series:\n%.300s", m.name, m.metricsURL, ctype, body)
		}
	}
}

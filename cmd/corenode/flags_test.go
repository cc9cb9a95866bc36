package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/internal/etcdrelease"
	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/server"
)

// TestEveryEtcdFlagIsAccepted builds each etcd release the table follows
// and reads its --help: a flag or a feature gate a new etcd release adds
// fails here until the table has a row for it.
func TestEveryEtcdFlagIsAccepted(t *testing.T) {
	for _, version := range etcdVersionsTested {
		t.Run(version, func(t *testing.T) {
			rel := etcdrelease.Build(t, version)
			out, err := exec.Command(rel.Etcd, "--help").CombinedOutput()
			if err != nil {
				t.Fatalf("etcd --help: %v\n%s", err, out)
			}
			names := map[string]bool{}
			for _, m := range regexp.MustCompile(`(?m)^\s+--([a-z0-9][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
				names[m[1]] = true
			}
			if len(names) < 100 {
				t.Fatalf("found %d flags in etcd --help; the format changed?\n%s", len(names), out)
			}
			s := newSettings()
			for n := range names {
				v := s.values[n]
				if v == nil {
					t.Errorf("etcd %s's --%s has no row in the flag table", version, n)
					continue
				}
				arg := "--" + n + "=" + v.def.def
				if v.IsBoolFlag() {
					arg = "--" + n
				}
				if _, err := parseFlags([]string{arg}, nil); err != nil && v.def.use != refused {
					t.Errorf("%s: %v", arg, err)
				}
			}
			// --feature-gates' help lists the gates, one a line:
			// "    Name=true|false (ALPHA - default=false)".
			gates := regexp.MustCompile(`(?m)^\s+([A-Z][A-Za-z0-9]*)=true\|false \(`).FindAllStringSubmatch(string(out), -1)
			if len(gates) < 5 {
				t.Fatalf("found %d feature gates in etcd --help; the format changed?\n%s", len(gates), out)
			}
			for _, g := range gates {
				for _, on := range []string{"true", "false"} {
					arg := "--feature-gates=" + g[1] + "=" + on
					if _, err := parseFlags([]string{arg}, nil); err != nil {
						t.Errorf("etcd %s's feature gate: %s: %v", version, arg, err)
					}
				}
			}
			t.Logf("%d flags and %d feature gates of etcd %s accepted", len(names), len(gates), version)
		})
	}
}

// TestFeatureGatesWithoutFlag: etcd 3.7's gates no flag sets are
// accepted, and named in the no-effect warning when they ask for what
// corenode does not do; AllAlpha and AllBeta set the gates nothing else
// sets, as etcd's.
func TestFeatureGatesWithoutFlag(t *testing.T) {
	noEffect := func(s *settings) []string {
		var none []string
		for _, w := range s.warnings {
			if strings.HasPrefix(w.msg, "flags that tune") {
				for i := 0; i+1 < len(w.attrs); i += 2 {
					none = append(none, w.attrs[i].(string))
				}
			}
		}
		return none
	}
	for _, c := range []struct {
		gates string
		warns []string
	}{
		{"FastLeaseKeepAlive=true", nil},
		{"FastLeaseKeepAlive=false", []string{"--feature-gates=FastLeaseKeepAlive=false"}},
		{"PriorityRequest=true", []string{"--feature-gates=PriorityRequest=true"}},
		{"PriorityRequest=false,FastLeaseKeepAlive=false", []string{"--feature-gates=FastLeaseKeepAlive=false", "--feature-gates=PriorityRequest=false"}},
	} {
		s, err := parseFlags([]string{"--feature-gates=" + c.gates}, nil)
		if err != nil {
			t.Errorf("%s: %v", c.gates, err)
			continue
		}
		if got := noEffect(s); !slices.Equal(got, c.warns) {
			t.Errorf("%s: no-effect warning names %q, want %q", c.gates, got, c.warns)
		}
	}

	s, err := parseFlags([]string{"--feature-gates=AllAlpha=true,CompactHashCheck=false"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.o.initialCorruptCheck || !s.o.setMemberLocalAddr || s.o.compactHashCheck {
		t.Errorf("AllAlpha=true,CompactHashCheck=false: initial corrupt check %v, member local addr %v, compact hash check %v",
			s.o.initialCorruptCheck, s.o.setMemberLocalAddr, s.o.compactHashCheck)
	}
	if got := noEffect(s); !slices.Contains(got, "--feature-gates=PriorityRequest=true") || slices.Contains(got, "--feature-gates=FastLeaseKeepAlive=false") {
		t.Errorf("AllAlpha=true: no-effect warning names %q", got)
	}
	// A gate's own flag wins over AllAlpha, rather than clashing with it.
	s, err = parseFlags([]string{"--experimental-initial-corrupt-check=false", "--feature-gates=AllAlpha=true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.o.initialCorruptCheck || !s.o.compactHashCheck {
		t.Errorf("--experimental-initial-corrupt-check=false with AllAlpha=true: initial %v, compact hash %v", s.o.initialCorruptCheck, s.o.compactHashCheck)
	}
	s, err = parseFlags([]string{"--feature-gates=AllBeta=false"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := noEffect(s); !slices.Contains(got, "--feature-gates=FastLeaseKeepAlive=false") || s.o.initialCorruptCheck {
		t.Errorf("AllBeta=false: no-effect warning names %q; initial corrupt check %v", got, s.o.initialCorruptCheck)
	}
}

// TestFlagTable checks each row says what corenode does, in a way the
// machinery can act on.
func TestFlagTable(t *testing.T) {
	for _, d := range flagTable() {
		if d.does == "" && d.name != "version" {
			t.Errorf("--%s: says nothing of what corenode does", d.name)
		}
		if (d.use == works || d.use == own) != (d.bind != nil) {
			t.Errorf("--%s: a flag that works is bound to an option, and only one", d.name)
		}
		if (d.use == own) != (d.etcd == "") {
			t.Errorf("--%s: etcd's flags have etcd's help, corenode's own none", d.name)
		}
		if d.use == fixed && d.only == "" {
			t.Errorf("--%s: fixed, but to no value", d.name)
		}
	}
}

func TestEnvironment(t *testing.T) {
	env := []string{
		"CORENODE_NAME=a", "ETCD_NAME=b", // CORENODE_ wins
		"ETCD_DATA_DIR=/d",
		"ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL=5s",
		"ETCD_SNAPSHOT_COUNT=5", // shadowed by the command line
		"ETCD_NO_SUCH_FLAG=1",
		"ETCDCTL_ENDPOINTS=x",         // etcdctl's, not etcd's
		"ETCD_INITIAL_CLUSTER_STATE=", // empty: sets nothing, as in etcd
	}
	s, err := parseFlags([]string{"--snapshot-count=7"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if s.o.name != "a" || s.o.dataDir != "/d" || s.o.initialState != "new" || s.o.watchProgressNotify != 5*time.Second || s.o.snapshotCount != 7 {
		t.Errorf("name %q data-dir %q progress %v snapshot-count %d", s.o.name, s.o.dataDir, s.o.watchProgressNotify, s.o.snapshotCount)
	}
	logged := warningsText(s)
	for _, want := range []string{
		"environment variables set one flag; the first wins used=CORENODE_NAME ignored=ETCD_NAME",
		"environment variable is shadowed by the command-line flag environment-variable=ETCD_SNAPSHOT_COUNT",
		"unrecognized environment variable environment-variable=ETCD_NO_SUCH_FLAG=1",
		"--experimental-watch-progress-notify-interval is deprecated",
	} {
		if !strings.Contains(logged, want) {
			t.Errorf("no warning %q in:\n%s", want, logged)
		}
	}
	if strings.Contains(logged, "ETCDCTL") {
		t.Errorf("warned of etcdctl's variable:\n%s", logged)
	}
	if _, err := parseFlags(nil, []string{"ETCD_HEARTBEAT_INTERVAL=fast"}); err == nil || !strings.Contains(err.Error(), "ETCD_HEARTBEAT_INTERVAL") {
		t.Errorf("a bad ETCD_ value: %v", err)
	}
}

func warningsText(s *settings) string {
	var b strings.Builder
	for _, w := range s.warnings {
		b.WriteString(w.msg)
		for i := 0; i+1 < len(w.attrs); i += 2 {
			fmt.Fprintf(&b, " %v=%v", w.attrs[i], w.attrs[i+1])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestWarningsAndRefusals(t *testing.T) {
	s, err := parseFlags([]string{"--backend-batch-limit=10", "--max-wals=3", "--pre-vote=false", "--pre-vote=true",
		"--enable-grpc-gateway=false", "--auto-compaction-retention=1h", "--experimental-enable-distributed-tracing",
		"--feature-gates=InitialCorruptCheck=true,SetMemberLocalAddr=true"}, nil)
	if !s.o.initialCorruptCheck {
		t.Error("--feature-gates=InitialCorruptCheck=true did not set --experimental-initial-corrupt-check")
	}
	if err != nil {
		t.Fatal(err)
	}
	var none, later []string
	for _, w := range s.warnings {
		for i := 0; i+1 < len(w.attrs); i += 2 {
			switch {
			case strings.HasPrefix(w.msg, "flags that tune"):
				none = append(none, w.attrs[i].(string))
			case strings.HasPrefix(w.msg, "flags not yet"):
				later = append(later, w.attrs[i].(string))
			}
		}
	}
	if got := strings.Join(none, " "); got != "--max-wals --backend-batch-limit --enable-grpc-gateway=false" {
		t.Errorf("no-effect warning names %s", got)
	}
	if !s.o.setMemberLocalAddr {
		t.Error("--feature-gates=SetMemberLocalAddr=true did not set its option")
	}
	// Every flag whose feature corenode should have, it has.
	if got := strings.Join(later, " "); got != "" {
		t.Errorf("not-yet warning names %s", got)
	}
	for _, args := range [][]string{
		{"--discovery=https://discovery.etcd.io/x"},
		{"--feature-gates=NoSuchGate=true"}, {"--experimental-initial-corrupt-check", "--feature-gates=InitialCorruptCheck=true"},
	} {
		if _, err := parseFlags(args, nil); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	if _, err := parseFlags([]string{"--discovery="}, nil); err != nil {
		t.Errorf("refused flags at their defaults: %v", err)
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "etcd.yaml")
	yaml := `
name: m1
data-dir: /var/lib/etcd
listen-client-urls: https://127.0.0.1:2379,https://10.0.0.1:2379
initial-cluster: m1=https://10.0.0.1:2380
heartbeat-interval: 200
election-timeout: 2000
experimental-watch-progress-notify-interval: 5000000000
corrupt-check-time: 30s
log-outputs: [stderr]
enable-v2: false
client-transport-security:
  cert-file: /pki/server.crt
  key-file: /pki/server.key
  client-cert-auth: true
  trusted-ca-file: /pki/ca.crt
  auto-tls: false
peer-transport-security:
  cert-file: /pki/peer.crt
  auto-tls: true
  whatever: 1
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := parseFlags([]string{"--config-file", file, "--name=ignored"}, []string{"ETCD_DATA_DIR=/ignored", "CORENODE_SNAPSHOT_COUNT=1"})
	if err != nil {
		t.Fatal(err)
	}
	o := s.o
	if o.name != "m1" || o.dataDir != "/var/lib/etcd" || strings.Join(o.listenClient, " ") != "https://127.0.0.1:2379 https://10.0.0.1:2379" ||
		o.initialCluster != "m1=https://10.0.0.1:2380" || o.heartbeatMS != 200 || o.electionMS != 2000 ||
		o.watchProgressNotify != 5*time.Second || o.corruptCheck != 30*time.Second || o.snapshotCount != 10000 {
		t.Errorf("options %+v", o)
	}
	if o.clientTLS.CertFile != "/pki/server.crt" || !o.clientTLS.ClientCertAuth || o.clientTLS.TrustedCAFile != "/pki/ca.crt" ||
		o.peerTLS.CertFile != "/pki/peer.crt" || !o.peerTLS.AutoTLS || o.clientTLS.AutoTLS {
		t.Errorf("TLS %+v %+v", o.clientTLS, o.peerTLS)
	}
	logged := warningsText(s)
	for _, want := range []string{
		"other configuration command line flags and environment variables will be ignored if provided path=" + file +
			" ignored=--name (command line), CORENODE_SNAPSHOT_COUNT, ETCD_DATA_DIR",
		"config file keys corenode does not know: ignored path=" + file + " keys=enable-v2, peer-transport-security.whatever",
		"--experimental-watch-progress-notify-interval is deprecated",
	} {
		if !strings.Contains(logged, want) {
			t.Errorf("no warning %q in:\n%s", want, logged)
		}
	}
	// ETCD_CONFIG_FILE names it too, as in etcd.
	s, err = parseFlags(nil, []string{"ETCD_CONFIG_FILE=" + file})
	if err != nil || s.o.name != "m1" {
		t.Errorf("ETCD_CONFIG_FILE: %v, name %q", err, s.o.name)
	}
	if err := os.WriteFile(file, []byte("heartbeat-interval: fast\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parseFlags([]string{"--config-file=" + file}, nil); err == nil || !strings.Contains(err.Error(), "heartbeat-interval") {
		t.Errorf("a bad value in the file: %v", err)
	}
}

var tsRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d{4})$`)

func TestLogFormats(t *testing.T) {
	var b bytes.Buffer
	l := slog.New(newZapHandler(&b, false, slog.LevelInfo))
	l.Debug("hidden")
	l.With("member", "m1").WithGroup("g").Info("hello", "took", 1500*time.Millisecond, "n", 3)
	l.Error("bad", "err", io.EOF)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines:\n%s", b.String())
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("%s: %v", lines[0], err)
	}
	if first["level"] != "info" || first["msg"] != "hello" || first["member"] != "m1" || !tsRE.MatchString(first["ts"].(string)) ||
		!strings.HasPrefix(first["caller"].(string), "corenode/flags_test.go:") {
		t.Errorf("line %s", lines[0])
	}
	if g, _ := first["g"].(map[string]any); g["took"] != "1.5s" || g["n"] != 3.0 {
		t.Errorf("fields of %s", lines[0])
	}
	if !strings.HasPrefix(lines[0], `{"level":"info","ts":"`) {
		t.Errorf("zap's key order: %s", lines[0])
	}
	b.Reset()
	l = slog.New(newZapHandler(&b, true, slog.LevelInfo))
	l.Warn("careful", "k", "v")
	f := strings.Split(strings.TrimSpace(b.String()), "\t")
	if len(f) != 5 || !tsRE.MatchString(f[0]) || f[1] != "warn" || f[3] != "careful" || f[4] != `{"k":"v"}` {
		t.Errorf("console line %q", b.String())
	}
	b.Reset()
	g := grpcLogger{slog.New(newZapHandler(&b, false, slog.LevelInfo))}
	g.Warningf("noisy %d", 1)
	g.Errorln("transport", "failed")
	if g.V(0) || strings.Contains(b.String(), "noisy") || !strings.Contains(b.String(), `"msg":"transport failed","logger":"grpc"`) {
		t.Errorf("gRPC's lines at info: V(0)=%v\n%s", g.V(0), b.String())
	}
	if _, _, err := newLogger("capnslog", "json", "info", nil, nil); err == nil {
		t.Error("--logger capnslog accepted")
	}
	if _, _, err := newLogger("zap", "json", "loud", nil, nil); err == nil {
		t.Error("--log-level loud accepted")
	}
}

func TestVersion(t *testing.T) {
	var b bytes.Buffer
	printVersion(&b)
	out := b.String()
	for _, re := range []string{`(?m)^corenode Version: \S+ \(\S+\)$`, `(?m)^etcd Version: ` + regexp.QuoteMeta(server.APIVersion) + `$`,
		`(?m)^Git SHA: \S+$`, `(?m)^Go Version: go`, `(?m)^Go OS/Arch: \S+/\S+$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no %s in:\n%s", re, out)
		}
	}
}

// TestKubeadmCommandLine starts a member with the command line kubeadm
// writes into etcd's static pod, with certificates of its own, and checks
// that it serves clients and metrics and that every line it logs is JSON.
func TestKubeadmCommandLine(t *testing.T) {
	dir := t.TempDir()
	pki := newPKI(t, dir)
	ports, err := freeport.Ports("127.0.0.1", 3)
	if err != nil {
		t.Fatal(err)
	}
	client := fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("https://127.0.0.1:%d", ports[1])
	metrics := fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	logFile := filepath.Join(dir, "member.log")
	args := []string{
		"--advertise-client-urls=" + client,
		"--cert-file=" + pki.serverCert,
		"--client-cert-auth=true",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--experimental-initial-corrupt-check=true",
		"--experimental-watch-progress-notify-interval=5s",
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=node1=" + peer,
		"--key-file=" + pki.serverKey,
		"--listen-client-urls=" + client,
		"--listen-metrics-urls=" + metrics,
		"--listen-peer-urls=" + peer,
		"--name=node1",
		"--peer-cert-file=" + pki.serverCert,
		"--peer-client-cert-auth=true",
		"--peer-key-file=" + pki.serverKey,
		"--peer-trusted-ca-file=" + pki.caCert,
		"--snapshot-count=10000",
		"--trusted-ca-file=" + pki.caCert,
		"--log-outputs=" + logFile, // not kubeadm's: the test reads it
	}
	s, err := parseFlags(args, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _, closeLog, err := start(s, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog()
	defer m.Close()
	select {
	case <-m.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("not ready after 20 s")
	}
	cert, err := tls.LoadX509KeyPair(pki.clientCert, pki.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second,
		TLS: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/registry/k", "v"); err != nil {
		t.Fatal(err)
	}
	if r, err := cli.Get(ctx, "/registry/k"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("get: %v %v", r, err)
	}
	for path, want := range map[string]string{"/health": `"health":"true"`, "/metrics": "corenode_", "/version": "404"} {
		resp, err := http.Get(metrics + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := string(body) + fmt.Sprint(resp.StatusCode); !strings.Contains(got, want) {
			t.Errorf("%s%s: %d %.200s", metrics, path, resp.StatusCode, body)
		}
	}
	cli.Close()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	closeLog()
	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n, ready, checked := 0, false, false
	for sc.Scan() {
		n++
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Errorf("line %d is not JSON: %v: %s", n, err, sc.Text())
			continue
		}
		ts, _ := line["ts"].(string)
		if line["level"] == nil || !tsRE.MatchString(ts) || line["msg"] == nil {
			t.Errorf("line %d lacks etcd's keys: %s", n, sc.Text())
		}
		ready = ready || line["msg"] == "ready to serve client requests"
		checked = checked || line["msg"] == "initial corruption checking passed; no corruption"
		if strings.HasPrefix(line["msg"].(string), "flags not yet implemented") || strings.HasPrefix(line["msg"].(string), "flags that tune") {
			t.Errorf("kubeadm's flags warned of: %s", sc.Text())
		}
	}
	t.Logf("%d log lines, each JSON", n)
	if !ready || !checked || n < 3 {
		t.Errorf("%d lines; ready to serve: %v; initial corruption check: %v", n, ready, checked)
	}
}

type pki struct {
	caCert, serverCert, serverKey, clientCert, clientKey string
	pool                                                 *x509.CertPool
}

// newPKI writes a CA, a certificate for 127.0.0.1 (server and client use,
// as kubeadm's etcd server and peer certificates) and a client one.
func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := pki{caCert: filepath.Join(dir, "ca.crt"), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	writePEMFile(t, p.caCert, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		writePEMFile(t, certFile, "CERTIFICATE", der)
		writePEMFile(t, keyFile, "EC PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.serverCert, p.serverKey = leaf("node1", 2)
	p.clientCert, p.clientKey = leaf("kube-apiserver-etcd-client", 3)
	return p
}

func writePEMFile(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

var updateDocs = flag.Bool("update-docs", false, "rewrite the flag table in docs/operations.md")

const (
	docBegin = "<!-- flag table: generated from cmd/corenode/flagtable.go; go test ./cmd/corenode -run TestOperationsDocFlagTable -update-docs -->\n"
	docEnd   = "<!-- end of flag table -->\n"
)

// TestOperationsDocFlagTable checks that docs/operations.md holds the
// table the flag table makes, so the doc lists every flag as it works.
func TestOperationsDocFlagTable(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "operations.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(doc), docBegin)
	table, after, ok2 := strings.Cut(rest, docEnd)
	if !ok || !ok2 {
		t.Fatalf("%s has no %q ... %q", path, docBegin, docEnd)
	}
	want := flagDocTable()
	if table == want {
		return
	}
	if *updateDocs {
		if err := os.WriteFile(path, []byte(before+docBegin+want+docEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the flag table in %s is not the one cmd/corenode/flagtable.go makes; run go test ./cmd/corenode -run TestOperationsDocFlagTable -update-docs", path)
}

func TestAutoCompactionFlags(t *testing.T) {
	for _, c := range []struct {
		mode, retention string
		want            member.AutoCompaction
	}{
		{"periodic", "0", member.AutoCompaction{}},
		{"periodic", "1", member.AutoCompaction{Periodic: time.Hour}},
		{"periodic", "5m", member.AutoCompaction{Periodic: 5 * time.Minute}},
		{"revision", "1000", member.AutoCompaction{Revisions: 1000}},
	} {
		got, err := autoCompaction(c.mode, c.retention)
		if err != nil || got != c.want {
			t.Errorf("%s %s: %+v, %v", c.mode, c.retention, got, err)
		}
	}
	for _, c := range [][2]string{{"periodic", "soon"}, {"revision", "1h"}, {"daily", "1"}, {"periodic", "-1"}} {
		if _, err := autoCompaction(c[0], c[1]); err == nil {
			t.Errorf("%v accepted", c)
		}
	}
}

// TestEveryWorkingFlagReachesTheMember sets each flag that works, alone,
// to a value other than its default, and checks that the member's config
// changes: a flag bound to an option nobody passes on fails here.
func TestEveryWorkingFlagReachesTheMember(t *testing.T) {
	// Flags that shape the process, not the member's config, or that need
	// the network to take effect (tested on their own).
	elsewhere := map[string]bool{
		"config-file": true, "version": true, "logger": true, "log-outputs": true, "log-level": true, "log-format": true,
		"enable-log-rotation": true, "log-rotation-config-json": true, "metrics": true, "feature-gates": true,
		"auth-token": true, "discovery-srv": true, "discovery-srv-name": true, "discovery-token": true, "discovery-endpoints": true,
		"discovery-dial-timeout": true, "discovery-request-timeout": true, "discovery-keepalive-time": true,
		"discovery-keepalive-timeout": true, "discovery-insecure-transport": true, "discovery-insecure-skip-tls-verify": true,
		"discovery-cert": true, "discovery-key": true, "discovery-cacert": true, "discovery-user": true,
		"discovery-password": true, "discovery-fallback": true,
		"enable-distributed-tracing": true, "distributed-tracing-address": true, "distributed-tracing-service-name": true,
		"distributed-tracing-instance-id": true, "distributed-tracing-sampling-rate": true,
	}
	samples := map[string][]string{
		"max-concurrent-streams":    {"100"},
		"cipher-suites":             {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"},
		"tls-min-version":           {"TLS1.3"},
		"tls-max-version":           {"TLS1.2"},
		"initial-cluster-state":     {"existing"},
		"log-store":                 {"boltdb"},
		"auto-compaction-mode":      {"revision", "--auto-compaction-retention=5"},
		"auto-compaction-retention": {"2h"},
	}
	// Flags that act only beside another: base is given with and without.
	base := map[string][]string{
		"experimental-compact-hash-check-enabled": {"--corrupt-check-time=0"},
		"compact-hash-check-time":                 {"--corrupt-check-time=0", "--experimental-compact-hash-check-enabled"},
	}
	config := func(args []string) member.Config {
		t.Helper()
		s, err := parseFlags(args, nil)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		cfg, err := memberConfig(&s.o, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		cfg.Logger = nil
		return cfg
	}
	for _, d := range flagTable() {
		if (d.use != works && d.use != own) || elsewhere[d.name] {
			continue
		}
		var arg []string
		if s, ok := samples[d.name]; ok {
			arg = append([]string{"--" + d.name + "=" + s[0]}, s[1:]...)
		} else {
			v := newSettings().values[d.name]
			switch p := v.p.(type) {
			case *bool:
				arg = []string{fmt.Sprintf("--%s=%v", d.name, !*p)}
			case *int:
				arg = []string{fmt.Sprintf("--%s=%d", d.name, *p+1)}
			case *time.Duration:
				arg = []string{fmt.Sprintf("--%s=%s", d.name, *p+time.Second)}
			case *string:
				arg = []string{"--" + d.name + "=/x"}
			case *[]string:
				arg = []string{"--" + d.name + "=http://127.0.0.1:9"}
			}
		}
		if reflect.DeepEqual(config(base[d.name]), config(append(base[d.name], arg...))) {
			t.Errorf("%v leaves the member's config as it was", arg)
		}
	}
}

// TestUnixSocketClientURL serves clients on a Unix socket, as etcd's
// unix:// client URLs do, beside a TCP one.
func TestUnixSocketClientURL(t *testing.T) {
	dir := t.TempDir()
	ports, err := freeport.Ports("127.0.0.1", 2)
	if err != nil {
		t.Fatal(err)
	}
	sock := "unix://" + filepath.Join(dir, "etcd.sock")
	tcp := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	startReady(t, []string{"--name=u", "--data-dir=" + filepath.Join(dir, "data"), "--listen-client-urls=" + sock + "," + tcp,
		"--advertise-client-urls=" + tcp, "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--log-outputs=" + filepath.Join(dir, "log")}, prometheus.NewRegistry())
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{sock}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "over a unix socket"); err != nil {
		t.Fatalf("put over %s: %v", sock, err)
	}
}

// TestSnapshotCatchUpEntriesFlag: --snapshot-catchup-entries and etcd's two
// older spellings set the entries kept behind a snapshot, etcd's 5000 by
// default; a count below 1 stops the start.
func TestSnapshotCatchUpEntriesFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want uint64
	}{
		{nil, 5000},
		{[]string{"--snapshot-catchup-entries=100"}, 100},
		{[]string{"--experimental-snapshot-catchup-entries=200"}, 200},
		{[]string{"--experimental-snapshot-catch-up-entries=300"}, 300},
	} {
		cfg, err := configOf(t, c.args...)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if cfg.SnapshotCatchUpEntries != c.want {
			t.Errorf("%v: %d entries kept behind a snapshot, want %d", c.args, cfg.SnapshotCatchUpEntries, c.want)
		}
	}
	if _, err := configOf(t, "--snapshot-catchup-entries=0"); err == nil || !strings.Contains(err.Error(), "--snapshot-catchup-entries") {
		t.Errorf("--snapshot-catchup-entries=0: %v, want an error naming the flag", err)
	}
}

// TestMaxSnapshotsFlag: --max-snapshots is the snapshots kept, etcd's 5 by
// default, and its 0 keeps every one (a negative count in the config).
func TestMaxSnapshotsFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{{nil, 5}, {[]string{"--max-snapshots=2"}, 2}, {[]string{"--max-snapshots=0"}, -1}} {
		cfg, err := configOf(t, c.args...)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if cfg.MaxSnapshots != c.want {
			t.Errorf("%v: MaxSnapshots %d, want %d", c.args, cfg.MaxSnapshots, c.want)
		}
	}
	if _, err := configOf(t, "--max-snapshots=-1"); err == nil || !strings.Contains(err.Error(), "--max-snapshots") {
		t.Errorf("--max-snapshots=-1: %v, want an error naming the flag", err)
	}
}

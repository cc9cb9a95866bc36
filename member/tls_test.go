package member_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// TestMutualTLS runs a cluster with client and peer mTLS: members replicate
// and forward over TLS, clients with a certificate from the cluster's CA are
// served, and everyone else is refused on both ports.
func TestMutualTLS(t *testing.T) {
	ca := membertest.NewCA(t, "cluster")
	server := ca.Issue("member", net.ParseIP("127.0.0.1"))
	client := ca.Issue("client")
	rogue := membertest.NewCA(t, "rogue")
	rogueClient := rogue.Issue("intruder", net.ParseIP("127.0.0.1"))

	info := member.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.File, ClientCertAuth: true}
	c := membertest.New(t, 3, membertest.WithTLS(info, info, ca.ClientConfig(client)))
	leader := c.WaitLeader()
	follower := (leader + 1) % 3

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A write through a follower is forwarded to the leader over the peer
	// port, so this also proves peer TLS carries member-to-member gRPC.
	if _, err := c.Client(follower).Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put through follower over TLS: %v", err)
	}
	resp, err := c.Client((leader+2)%3).Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get over TLS = %v, %v", resp, err)
	}

	refused := map[string]*tls.Config{
		"no client certificate": ca.ClientConfig(membertest.Pair{}),
		"certificate of another CA": func() *tls.Config {
			cfg := ca.ClientConfig(membertest.Pair{})
			cfg.Certificates = rogue.ClientConfig(rogueClient).Certificates
			return cfg
		}(),
		"plain text": nil,
	}
	for name, cfg := range refused {
		t.Run("client/"+name, func(t *testing.T) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoint(leader)}, TLS: cfg,
				DialTimeout: time.Second, Logger: zap.NewNop()})
			if err != nil {
				return // refused at dial: what we want
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := cli.Put(ctx, "intruder", "x"); err == nil {
				t.Fatal("put succeeded without a valid client certificate")
			}
		})
	}
	for name, cfg := range refused {
		t.Run("peer/"+name, func(t *testing.T) {
			if err := peerExchange(c.Members[leader].PeerAddr(), cfg); err == nil {
				t.Fatal("peer port served a connection without a valid certificate")
			}
		})
	}
	t.Run("peer/valid certificate", func(t *testing.T) {
		// The positive control for the refusals above: the same exchange
		// with a member certificate is served.
		if err := peerExchange(c.Members[leader].PeerAddr(), ca.ClientConfig(server)); err != nil {
			t.Fatalf("peer exchange with a valid certificate: %v", err)
		}
	})

	t.Run("health over https", func(t *testing.T) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(client)}, Timeout: 5 * time.Second}
		resp, err := hc.Get(c.ClientURL(leader) + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h struct{ Health string }
		body, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" || resp.ProtoMajor != 1 {
			t.Fatalf("/health over TLS: %s %q %v", resp.Proto, body, err)
		}
		// The JSON gateway is served over TLS too.
		resp, err = hc.Post(c.ClientURL(leader)+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"L3RscyFh"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"header":{"cluster_id"`) {
			t.Fatalf("gateway over TLS: %s %q", resp.Status, body)
		}
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(membertest.Pair{})}, Timeout: 5 * time.Second}
		if resp, err := hc.Get(c.ClientURL(leader) + "/health"); err == nil {
			resp.Body.Close()
			t.Fatal("/health served a client without a certificate")
		}
	})
}

// peerExchange opens a peer connection as a member would and asks for the
// gRPC stream; it fails unless the member accepts the connection and answers
// with HTTP/2 (the server's SETTINGS frame arrives first).
func peerExchange(addr string, cfg *tls.Config) error {
	raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer raw.Close()
	conn := raw
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
		tc := tls.Client(raw, cfg)
		if err := tc.Handshake(); err != nil {
			return err
		}
		conn = tc
	}
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write(append([]byte{'G'}, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"...)); err != nil {
		return err
	}
	buf := make([]byte, 9)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if buf[3] != 0x4 { // frame type SETTINGS
		return io.ErrUnexpectedEOF
	}
	return nil
}

// TestAutoTLS runs a cluster on --auto-tls and --peer-auto-tls: members
// replicate and forward over their self-signed certificates, a client that
// skips verification is served, one that verifies is refused (nobody vouches
// for the certificate), and a restarted member keeps its certificate.
func TestAutoTLS(t *testing.T) {
	auto := member.TLSInfo{AutoTLS: true}
	c := membertest.New(t, 3, membertest.WithTLS(auto, auto, &tls.Config{InsecureSkipVerify: true}))
	leader := c.WaitLeader()
	follower := (leader + 1) % 3

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client(follower).Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put through a follower over auto TLS: %v", err)
	}
	for _, side := range []string{"client", "peer"} {
		if _, err := os.Stat(filepath.Join(c.Config(follower).DataDir, "fixtures", side, "cert.pem")); err != nil {
			t.Fatalf("no %s certificate in the data dir: %v", side, err)
		}
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoint(leader)}, TLS: &tls.Config{MinVersion: tls.VersionTLS12},
		DialTimeout: time.Second, Logger: zap.NewNop()})
	if err == nil {
		defer cli.Close()
		vctx, vcancel := context.WithTimeout(ctx, 2*time.Second)
		defer vcancel()
		if _, err := cli.Get(vctx, "k"); err == nil {
			t.Fatal("a client verifying the certificate accepted a self-signed one")
		}
	}

	certFile := filepath.Join(c.Config(follower).DataDir, "fixtures", "peer", "cert.pem")
	before, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	c.Stop(follower)
	c.Restart(follower)
	after, err := os.ReadFile(certFile)
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("a restarted member made a new certificate (err %v)", err)
	}
	c.CatchUp(leader)
	resp, err := c.Client(follower).Get(ctx, "k", clientv3.WithSerializable())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("restarted member over auto TLS: %v, %v", resp, err)
	}
}

// TestClientCRL refuses a client whose certificate the --client-crl-file
// revokes, serves the others, and reads the list again at every connection.
func TestClientCRL(t *testing.T) {
	ca := membertest.NewCA(t, "cluster")
	server := ca.Issue("member", net.ParseIP("127.0.0.1"))
	good, revoked := ca.Issue("good"), ca.Issue("revoked")
	crl := ca.Revoke(filepath.Join(t.TempDir(), "crl.pem"), revoked)
	info := member.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.File, ClientCertAuth: true, CRLFile: crl}
	peer := member.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.File}
	c := membertest.New(t, 1, membertest.WithTLS(info, peer, ca.ClientConfig(good)))
	c.WaitLeader()

	put := func(p membertest.Pair) error {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoint(0)}, TLS: ca.ClientConfig(p),
			DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = cli.Put(ctx, "k", "v")
		return err
	}
	if err := put(good); err != nil {
		t.Fatalf("a client the list does not revoke: %v", err)
	}
	if err := put(revoked); err == nil {
		t.Fatal("a client with a revoked certificate was served")
	}
	ca.Revoke(crl, revoked, good)
	if err := put(good); err == nil {
		t.Fatal("a certificate revoked by the new list was still served")
	}
}

// TestClientCertFileChecked: --client-cert-file and --client-key-file,
// which etcd presents when it dials its own client URLs, are loaded at
// start: a member with a pair that loads starts; one naming a missing
// file, a key of another certificate, or half a pair does not, and its
// error names the flags.
func TestClientCertFileChecked(t *testing.T) {
	ca := membertest.NewCA(t, "cluster")
	server := ca.Issue("member", net.ParseIP("127.0.0.1"))
	client := ca.Issue("gateway")
	info := member.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.File, ClientCertAuth: true}
	for name, c := range map[string]struct {
		cert, key, want string
	}{
		"missing file":      {filepath.Join(t.TempDir(), "none.crt"), client.KeyFile, "--client-cert-file/--client-key-file"},
		"another's key":     {client.CertFile, server.KeyFile, "--client-cert-file/--client-key-file"},
		"certificate alone": {client.CertFile, "", "--client-cert-file and --client-key-file go together"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := info
			bad.ClientCertFile, bad.ClientKeyFile = c.cert, c.key
			m, err := member.Start(member.Config{Name: "a", DataDir: t.TempDir(), ClientTLS: bad,
				ListenClientURLs: []string{"https://127.0.0.1:0"}, AdvertiseClientURLs: []string{"https://127.0.0.1:2379"},
				ListenPeerURLs: []string{"http://127.0.0.1:0"}, InitialAdvertisePeerURLs: []string{"http://127.0.0.1:2380"},
				InitialCluster: "a=http://127.0.0.1:2380", Logger: membertest.Logger()})
			if err == nil {
				m.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want an error naming %s", err, c.want)
			}
		})
	}
	t.Run("a pair that loads", func(t *testing.T) {
		good := info
		good.ClientCertFile, good.ClientKeyFile = client.CertFile, client.KeyFile
		c := membertest.New(t, 1, membertest.WithTLS(good, info, ca.ClientConfig(client)))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Client(0).Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
	})
}

package member_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// TestTLSPolicy checks etcd's certificate-name restrictions and TLS
// version bounds on a running member: a peer certificate of the cluster's
// CA but another common name is refused on the peer port, a client
// certificate not valid for an allowed hostname on the client port, and a
// client that cannot speak the minimum version on both.
func TestTLSPolicy(t *testing.T) {
	ca := membertest.NewCA(t, "cluster")
	server := ca.Issue("member", net.ParseIP("127.0.0.1"))
	otherPeer := ca.Issue("not-a-member", net.ParseIP("127.0.0.1"))
	goodClient := ca.Issue("apiserver", net.ParseIP("127.0.0.1"))
	otherClient := ca.Issue("someone")
	client := member.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.File, ClientCertAuth: true,
		AllowedHostnames: []string{"127.0.0.1"}, MinVersion: tls.VersionTLS13}
	peer := member.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.File, ClientCertAuth: true,
		AllowedCNs: []string{"member"}, MinVersion: tls.VersionTLS13}
	c := membertest.New(t, 1, membertest.WithTLS(client, peer, ca.ClientConfig(goodClient)))
	c.WaitLeader()

	if err := peerExchange(c.Members[0].PeerAddr(), ca.ClientConfig(server)); err != nil {
		t.Fatalf("peer with an allowed common name: %v", err)
	}
	if err := peerExchange(c.Members[0].PeerAddr(), ca.ClientConfig(otherPeer)); err == nil {
		t.Fatal("peer port served a certificate whose common name --peer-cert-allowed-cn does not list")
	}
	tls12 := ca.ClientConfig(server)
	tls12.MaxVersion = tls.VersionTLS12
	if err := peerExchange(c.Members[0].PeerAddr(), tls12); err == nil {
		t.Fatal("peer port served TLS 1.2 below --tls-min-version TLS1.3")
	}

	put := func(cfg *tls.Config) error {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoint(0)}, TLS: cfg, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = cli.Put(ctx, "k", "v")
		return err
	}
	if err := put(ca.ClientConfig(goodClient)); err != nil {
		t.Fatalf("client valid for an allowed hostname: %v", err)
	}
	if err := put(ca.ClientConfig(otherClient)); err == nil {
		t.Fatal("client port served a certificate not valid for --client-cert-allowed-hostname")
	}
	tls12 = ca.ClientConfig(goodClient)
	tls12.MaxVersion = tls.VersionTLS12
	if err := put(tls12); err == nil {
		t.Fatal("client port served TLS 1.2 below --tls-min-version TLS1.3")
	}
}

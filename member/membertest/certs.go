package membertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/member"
)

// CA is a throwaway certificate authority for TLS tests: tests make their
// own certificates, so nothing secret or expiring lives in the repository.
type CA struct {
	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate's PEM file.
	File string
}

// Pair is an issued certificate and key on disk.
type Pair struct{ CertFile, KeyFile string }

var serial atomic.Int64

// NewCA creates a CA in a temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{t: t, dir: t.TempDir(), cert: cert, key: key}
	ca.File = ca.write(name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// Issue signs a certificate for name, valid for serving on ips and for
// authenticating as a client (members do both on the peer port).
func (ca *CA) Issue(name string, ips ...net.IP) Pair {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  ips,
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return Pair{CertFile: ca.write(name+".pem", "CERTIFICATE", der), KeyFile: ca.write(name+"-key.pem", "EC PRIVATE KEY", kder)}
}

// ClientConfig is a client TLS config that trusts ca and presents p (when
// p has files).
func (ca *CA) ClientConfig(p Pair) *tls.Config {
	ca.t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if p.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
		if err != nil {
			ca.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// Revoke writes the CA's revocation list naming pairs to file (PEM),
// replacing what file held, and returns file.
func (ca *CA) Revoke(file string, pairs ...Pair) string {
	ca.t.Helper()
	var revoked []x509.RevocationListEntry
	for _, p := range pairs {
		data, err := os.ReadFile(p.CertFile)
		if err != nil {
			ca.t.Fatal(err)
		}
		b, _ := pem.Decode(data)
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			ca.t.Fatal(err)
		}
		revoked = append(revoked, x509.RevocationListEntry{SerialNumber: cert.SerialNumber, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(serial.Add(1)), ThisUpdate: time.Now(), NextUpdate: time.Now().Add(time.Hour),
		RevokedCertificateEntries: revoked,
	}, ca.cert, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return file
}

func (ca *CA) write(name, kind string, der []byte) string {
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return p
}

// WithJWT gives every member the same fresh ES256 key pair as etcd's
// --auth-token jwt: tokens any member verifies, none stores.
func WithJWT(t testing.TB) Option {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "jwt.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	kind, err := auth.ParseTokenKind("jwt,sign-method=ES256,priv-key=" + p)
	if err != nil {
		t.Fatal(err)
	}
	return WithConfig(func(_ int, cfg *member.Config) { cfg.AuthTokens = kind })
}

package member

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSInfo is one side's certificates, as etcd's --cert-file, --key-file,
// --trusted-ca-file and --client-cert-auth (or their --peer-* twins) give them.
type TLSInfo struct {
	CertFile      string
	KeyFile       string
	TrustedCAFile string
	// ClientCertAuth refuses connections without a certificate signed by
	// TrustedCAFile.
	ClientCertAuth bool
}

func (t TLSInfo) empty() bool {
	return t.CertFile == "" && t.KeyFile == "" && t.TrustedCAFile == "" && !t.ClientCertAuth
}

// load reads the key pair and the CA pool, checking the combination first so
// a mistake is reported by flag name rather than as a handshake failure later.
func (t TLSInfo) load(prefix string) (tls.Certificate, *x509.CertPool, error) {
	if t.CertFile == "" || t.KeyFile == "" {
		return tls.Certificate{}, nil, fmt.Errorf("--%scert-file and --%skey-file are both required for https:// URLs", prefix, prefix)
	}
	if t.ClientCertAuth && t.TrustedCAFile == "" {
		return tls.Certificate{}, nil, fmt.Errorf("--%sclient-cert-auth needs --%strusted-ca-file", prefix, prefix)
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("--%scert-file/--%skey-file: %w", prefix, prefix, err)
	}
	if t.TrustedCAFile == "" {
		return cert, nil, nil
	}
	pem, err := os.ReadFile(t.TrustedCAFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("--%strusted-ca-file: %w", prefix, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("--%strusted-ca-file %s: no PEM certificates in it", prefix, t.TrustedCAFile)
	}
	return cert, pool, nil
}

// serverConfig is the listener side.
func (t TLSInfo) serverConfig(prefix string) (*tls.Config, error) {
	cert, pool, err := t.load(prefix)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		// gRPC clients offer only h2; HTTP clients (curl, Prometheus) also
		// offer http/1.1. Preferring http/1.1 sends each kind to the server
		// that speaks it on the shared client port.
		NextProtos: []string{"http/1.1", "h2"},
	}
	if t.ClientCertAuth {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// clientConfig is the dialing side, for members dialing each other: the
// member presents its own certificate and checks the other's against the CA.
func (t TLSInfo) clientConfig(prefix string) (*tls.Config, error) {
	cert, pool, err := t.load(prefix)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

// tlsFor returns the server config for listeners whose URLs use https, and
// checks that TLS files are not given where no URL would use them (a typo
// in a scheme would otherwise silently serve plain text).
func tlsFor(urls []string, info TLSInfo, prefix, urlFlag string) (*tls.Config, error) {
	https := 0
	for _, u := range urls {
		if isHTTPS(u) {
			https++
		}
	}
	if https == 0 {
		if !info.empty() {
			return nil, fmt.Errorf("--%scert-file and friends are set but no %s URL is https://", prefix, urlFlag)
		}
		return nil, nil
	}
	if https != len(urls) {
		return nil, errors.New(urlFlag + " mixes http:// and https://; use one scheme")
	}
	return info.serverConfig(prefix)
}

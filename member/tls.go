package member

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// TLSInfo is one side's certificates, as etcd's --cert-file, --key-file,
// --trusted-ca-file, --client-cert-auth, --client-crl-file and --auto-tls
// (or their --peer-* twins) give them.
type TLSInfo struct {
	CertFile      string
	KeyFile       string
	TrustedCAFile string
	// ClientCertAuth refuses connections without a certificate signed by
	// TrustedCAFile.
	ClientCertAuth bool
	// CRLFile is a certificate revocation list (PEM or DER): a connection
	// presenting a certificate it revokes is refused. It is read at every
	// handshake, as etcd reads it, so a new list takes effect without a
	// restart.
	CRLFile string
	// AutoTLS serves https:// URLs with a self-signed certificate the
	// member makes on first start (see selfCert), when CertFile and KeyFile
	// are not given. It encrypts; it authenticates nobody: members dialing
	// each other with it do not verify the certificate, as etcd's
	// --peer-auto-tls does not.
	AutoTLS bool
	// MinVersion and MaxVersion bound the TLS versions (etcd's
	// --tls-min-version, --tls-max-version); zero means TLS 1.2 and Go's
	// newest. CipherSuites are the TLS 1.2 suites offered (etcd's
	// --cipher-suites); nil means Go's.
	MinVersion, MaxVersion uint16
	CipherSuites           []uint16

	// insecureSkipVerify is set for a self-signed certificate: members
	// dial each other without verifying it.
	insecureSkipVerify bool
}

func (t TLSInfo) empty() bool {
	return t.CertFile == "" && t.KeyFile == "" && t.TrustedCAFile == "" && !t.ClientCertAuth && t.CRLFile == ""
}

// withAutoTLS returns t with a self-signed certificate in dir when it asks
// for one and names none, as etcd's --auto-tls: the certificate is made on
// the first start, for the hosts of urls, and kept. Certificates given by
// file win, as in etcd.
func (t TLSInfo) withAutoTLS(dir string, urls []string, validityYears uint, prefix string, log *slog.Logger) (TLSInfo, error) {
	if !t.AutoTLS {
		return t, nil
	}
	if t.CertFile != "" || t.KeyFile != "" {
		log.Warn("ignoring --"+prefix+"auto-tls: certificates are given", "cert-file", t.CertFile)
		return t, nil
	}
	https := false
	for _, u := range urls {
		https = https || isHTTPS(u)
	}
	if !https {
		log.Warn("--" + prefix + "auto-tls has no effect: no URL of that side is https://")
		return t, nil
	}
	cert, key, err := selfCert(dir, urls, validityYears, log)
	if err != nil {
		return t, fmt.Errorf("--%sauto-tls: %w", prefix, err)
	}
	t.CertFile, t.KeyFile, t.insecureSkipVerify = cert, key, true
	return t, nil
}

// autoTLSDir is where a member keeps its self-signed certificates, as
// etcd: DATA_DIR/fixtures/client and DATA_DIR/fixtures/peer.
func autoTLSDir(dataDir, side string) string { return filepath.Join(dataDir, "fixtures", side) }

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
		MinVersion:   max(t.MinVersion, tls.VersionTLS12),
		MaxVersion:   t.MaxVersion,
		CipherSuites: t.CipherSuites,
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
	if t.CRLFile != "" {
		if _, err := readCRL(t.CRLFile); err != nil {
			return nil, fmt.Errorf("--%scrl-file: %w", prefix, err)
		}
		file := t.CRLFile
		c.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error { return checkRevoked(file, raw) }
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
	return &tls.Config{MinVersion: max(t.MinVersion, tls.VersionTLS12), MaxVersion: t.MaxVersion, CipherSuites: t.CipherSuites,
		Certificates: []tls.Certificate{cert}, RootCAs: pool, InsecureSkipVerify: t.insecureSkipVerify}, nil
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

package member

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
	// ClientCertFile and ClientKeyFile, when given, are what a member
	// presents when it dials the others instead of CertFile and KeyFile
	// (etcd's --peer-client-cert-file, --peer-client-key-file). On the
	// client side (etcd's --client-cert-file, --client-key-file) they are
	// only checked at start: nothing dials a client URL (see Start).
	ClientCertFile, ClientKeyFile string
	// AllowedCNs and AllowedHostnames, when given, accept only
	// certificates with one of those common names, or valid for one of
	// those hostnames (etcd's --peer-cert-allowed-cn and
	// --peer-cert-allowed-hostname, --client-cert-allowed-hostname): both
	// the certificates connecting and, dialing, those dialed. They need
	// ClientCertAuth, and exclude each other, as in etcd.
	AllowedCNs, AllowedHostnames []string

	// insecureSkipVerify is set for a self-signed certificate: members
	// dial each other without verifying it.
	insecureSkipVerify bool
}

func (t TLSInfo) empty() bool {
	return t.CertFile == "" && t.KeyFile == "" && t.TrustedCAFile == "" && !t.ClientCertAuth && t.CRLFile == "" &&
		t.ClientCertFile == "" && t.ClientKeyFile == "" && len(t.AllowedCNs) == 0 && len(t.AllowedHostnames) == 0
}

// nameCheck is the AllowedCNs/AllowedHostnames check of a verified chain,
// nil when neither is set.
func (t TLSInfo) nameCheck(prefix string) (func(verified [][]*x509.Certificate) error, error) {
	if len(t.AllowedCNs) == 0 && len(t.AllowedHostnames) == 0 {
		return nil, nil
	}
	allowedFlag := "--" + prefix + "cert-allowed-cn/--" + prefix + "cert-allowed-hostname"
	if prefix == "" {
		allowedFlag = "--client-cert-allowed-hostname"
	}
	if len(t.AllowedCNs) > 0 && len(t.AllowedHostnames) > 0 {
		return nil, fmt.Errorf("--%scert-allowed-cn and --%scert-allowed-hostname exclude each other", prefix, prefix)
	}
	if !t.ClientCertAuth {
		return nil, fmt.Errorf("%s needs --%sclient-cert-auth", allowedFlag, prefix)
	}
	cns, hosts := t.AllowedCNs, t.AllowedHostnames
	return func(verified [][]*x509.Certificate) error {
		for _, chain := range verified {
			if len(chain) == 0 {
				continue
			}
			if slices.Contains(cns, chain[0].Subject.CommonName) {
				return nil
			}
			for _, h := range hosts {
				if chain[0].VerifyHostname(h) == nil {
					return nil
				}
			}
		}
		return fmt.Errorf("certificate refused: its name is not one %s allows", allowedFlag)
	}, nil
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
	names, err := t.nameCheck(prefix)
	if err != nil {
		return nil, err
	}
	crl := ""
	if t.CRLFile != "" {
		if _, err := readCRL(t.CRLFile); err != nil {
			return nil, fmt.Errorf("--%scrl-file: %w", prefix, err)
		}
		crl = t.CRLFile
	}
	if names != nil || crl != "" {
		c.VerifyPeerCertificate = func(raw [][]byte, verified [][]*x509.Certificate) error {
			if crl != "" {
				if err := checkRevoked(crl, raw); err != nil {
					return err
				}
			}
			if names != nil {
				return names(verified)
			}
			return nil
		}
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
	if (t.ClientCertFile == "") != (t.ClientKeyFile == "") {
		return nil, fmt.Errorf("--%sclient-cert-file and --%sclient-key-file go together: give both or neither", prefix, prefix)
	}
	if t.ClientCertFile != "" {
		if cert, err = tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile); err != nil {
			return nil, fmt.Errorf("--%sclient-cert-file/--%sclient-key-file: %w", prefix, prefix, err)
		}
	}
	c := &tls.Config{MinVersion: max(t.MinVersion, tls.VersionTLS12), MaxVersion: t.MaxVersion, CipherSuites: t.CipherSuites,
		Certificates: []tls.Certificate{cert}, RootCAs: pool, InsecureSkipVerify: t.insecureSkipVerify}
	names, err := t.nameCheck(prefix)
	if err != nil {
		return nil, err
	}
	if names != nil && !t.insecureSkipVerify {
		c.VerifyPeerCertificate = func(_ [][]byte, verified [][]*x509.Certificate) error { return names(verified) }
	}
	return c, nil
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

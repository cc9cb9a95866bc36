package member

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// selfCert returns the paths of a self-signed certificate and its key in
// dir for the hosts of urls, making them when dir holds none: a member
// restarted with --auto-tls keeps the certificate its peers and clients
// saw. It is its own CA (as etcd's), so a client that pins it can verify it.
func selfCert(dir string, urls []string, validityYears uint, log *slog.Logger) (certFile, keyFile string, err error) {
	if validityYears == 0 {
		return "", "", errors.New("--self-signed-cert-validity must be at least 1 (year)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("certificate dir: %w", err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	if certErr == nil && keyErr == nil {
		return certFile, keyFile, nil
	}

	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return "", "", fmt.Errorf("certificate serial number: %w", err)
	}
	now := time.Now()
	tmpl := x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"corenode"}},
		NotBefore:             now.Add(-time.Minute), // a peer whose clock is a little behind still accepts it
		NotAfter:              now.Add(time.Duration(validityYears) * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(u.Hostname()); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if u.Hostname() != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, u.Hostname())
		}
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("certificate key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &priv.PublicKey, priv)
	if err != nil {
		return "", "", fmt.Errorf("create certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		return "", "", fmt.Errorf("encode key: %w", err)
	}
	// The key first: a certificate without its key on disk would be taken
	// as made on the next start.
	if err := writePEM(keyFile, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return "", "", err
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return "", "", err
	}
	log.Warn("made a self-signed certificate (auto TLS: encrypted, but nobody is authenticated)",
		"cert-file", certFile, "not-after", tmpl.NotAfter.Format(time.RFC3339), "dns", tmpl.DNSNames, "ip", tmpl.IPAddresses)
	return certFile, keyFile, nil
}

// writePEM writes one PEM block to path through a temporary file, so a crash
// leaves the old file or the new one, never half of one.
func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	err = pem.Encode(f, &pem.Block{Type: kind, Bytes: der})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readCRL parses a certificate revocation list in PEM or DER.
func readCRL(file string) (*x509.RevocationList, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if b, _ := pem.Decode(data); b != nil {
		data = b.Bytes
	}
	crl, err := x509.ParseRevocationList(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return crl, nil
}

// checkRevoked refuses a handshake whose certificates the list in file
// revokes. It reads the file each time, so replacing it takes effect at the
// next connection; a list that cannot be read refuses every connection
// rather than let a revoked certificate through.
func checkRevoked(file string, raw [][]byte) error {
	if len(raw) == 0 {
		return nil
	}
	crl, err := readCRL(file)
	if err != nil {
		return fmt.Errorf("certificate revocation list: %w", err)
	}
	for _, der := range raw {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		for _, r := range crl.RevokedCertificateEntries {
			if r.SerialNumber.Cmp(cert.SerialNumber) == 0 {
				return fmt.Errorf("certificate %q (serial %s) is revoked", cert.Subject.CommonName, cert.SerialNumber)
			}
		}
	}
	return nil
}

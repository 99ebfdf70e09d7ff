// Package certstest makes certificates for tests with crypto/x509: a CA and
// server and client certificates it issues, written as PEM files. Nothing
// outside tests should import it.
package certstest

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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte
}

// NewCA makes a self-signed CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := template(t, name, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature)
	tmpl.BasicConstraintsValid = true
	tmpl.IsCA = true
	c, der := create(t, tmpl, tmpl, key, key)
	return &CA{Cert: c, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// template is a certificate for cn, valid from an hour ago for a day.
func template(t testing.TB, cn string, usage x509.KeyUsage) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     usage,
	}
}

// create signs tmpl for key with parent's signKey and returns the
// certificate and its DER.
func create(t testing.TB, tmpl, parent *x509.Certificate, key, signKey *ecdsa.PrivateKey) (*x509.Certificate, []byte) {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, der
}

// Pool is a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is an issued certificate and its key, in PEM.
type Leaf struct {
	Cert            *x509.Certificate
	CertPEM, KeyPEM []byte
	TLS             tls.Certificate
}

// Server issues a server certificate (also valid for clients) for the
// SANs: IP addresses, URIs (with "://"), emails (with "@") or DNS names.
func (ca *CA) Server(t testing.TB, cn string, sans ...string) *Leaf {
	return ca.issue(t, cn, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, sans)
}

// Client issues a client certificate with the SANs (as Server does).
func (ca *CA) Client(t testing.TB, cn string, sans ...string) *Leaf {
	return ca.issue(t, cn, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, sans)
}

func (ca *CA) issue(t testing.TB, cn string, usage []x509.ExtKeyUsage, sans []string) *Leaf {
	t.Helper()
	key := newKey(t)
	tmpl := template(t, cn, x509.KeyUsageDigitalSignature)
	tmpl.ExtKeyUsage = usage
	for _, s := range sans {
		switch {
		case net.ParseIP(s) != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(s))
		case strings.Contains(s, "://"):
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.URIs = append(tmpl.URIs, u)
		case strings.Contains(s, "@"):
			tmpl.EmailAddresses = append(tmpl.EmailAddresses, s)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	c, der := create(t, tmpl, ca.Cert, key, ca.Key)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := &Leaf{
		Cert:    c,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}
	if l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return l
}

// Write writes the leaf as dir/name.crt and dir/name.key, each atomically
// (a temporary file renamed over the old one, as cert-manager's and
// Kubernetes' writers do), and returns their paths.
func (l *Leaf) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	WriteFile(t, certFile, l.CertPEM)
	WriteFile(t, keyFile, l.KeyPEM)
	return certFile, keyFile
}

// WriteCA writes the CA's certificate as dir/name.crt.
func (ca *CA) Write(t testing.TB, dir, name string) string {
	t.Helper()
	f := filepath.Join(dir, name+".crt")
	WriteFile(t, f, ca.PEM)
	return f
}

// WriteFile writes b to path through a renamed temporary file.
func WriteFile(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

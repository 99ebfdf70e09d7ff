// Package certs loads the TLS certificates of sluice serve and re-reads
// them when their files change, so that certificates rotated by
// cert-manager, Vault agent or a Kubernetes secret volume (a rename or a
// symlink swap) are served to the next connection without a restart, while
// open connections keep the certificate they were set up with.
//
// A Server checks its files with one stat each on every handshake (a
// microsecond against the hundreds a handshake costs), re-reads them when
// the size, the modification time or the inode changed, and keeps the
// certificates in force when the new files do not load (a half-written
// pair, a key that does not match, a named pipe or a device put at the
// path, a file past MaxFileSize): the error is logged once per change. A
// read never blocks, and no handshake waits for another's read.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/service/livefile"
)

// ServerOptions name the files of a TLS listener.
type ServerOptions struct {
	CertFile, KeyFile string // PEM certificate chain and its private key; both required
	// ClientCAFile, when set, turns on mTLS: every client must present a
	// certificate that chains to one of its PEM certificates.
	ClientCAFile string
	// ClientSANs, when not empty, also require the client certificate to
	// carry one of these as a DNS name, URI, email address or IP address
	// SAN. It needs ClientCAFile.
	ClientSANs []string
	Log        *slog.Logger // default: discard
}

// MaxFileSize bounds a certificate, key or CA file, in bytes.
const MaxFileSize = 4 << 20

// Server holds a listener's certificate, and the client CA under mTLS.
type Server struct {
	opts ServerOptions
	v    *livefile.Value[*state]
}

// state is one loaded generation of the files, with the tls.Configs built
// from it.
type state struct {
	cert *tls.Certificate
	pool *x509.CertPool // nil without a client CA

	mu   sync.Mutex
	cfgs map[string]*tls.Config // by NextProtos
}

// NewServer loads the files; an error names the file that failed.
func NewServer(o ServerOptions) (*Server, error) {
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("certs: a certificate and a key are both required")
	}
	if len(o.ClientSANs) > 0 && o.ClientCAFile == "" {
		return nil, errors.New("certs: a required client SAN needs a client CA")
	}
	files := []string{o.CertFile, o.KeyFile}
	if o.ClientCAFile != "" {
		files = append(files, o.ClientCAFile)
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: o}
	v, err := livefile.New(files, s.load, livefile.Hooks[*state]{
		Loaded: func(st *state) {
			log.Info("TLS files reloaded", "cert", o.CertFile, "not_after", st.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
		},
		Failed: func(err error) {
			log.Error("TLS files changed but do not load; serving the previous certificates", "err", err)
		},
	})
	if err != nil {
		return nil, err
	}
	s.v = v
	return s, nil
}

func (s *Server) load() (*state, error) {
	cert, err := loadKeyPair(s.opts.CertFile, s.opts.KeyFile)
	if err != nil {
		return nil, err
	}
	st := &state{cert: cert, cfgs: map[string]*tls.Config{}}
	if s.opts.ClientCAFile != "" {
		if st.pool, err = LoadPool(s.opts.ClientCAFile); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// loadKeyPair reads a PEM certificate chain and its key.
func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := livefile.Read(certFile, MaxFileSize)
	if err == nil {
		var keyPEM []byte
		if keyPEM, err = livefile.Read(keyFile, MaxFileSize); err == nil {
			var cert tls.Certificate
			if cert, err = tls.X509KeyPair(certPEM, keyPEM); err == nil {
				return &cert, nil
			}
		}
	}
	return nil, fmt.Errorf("certs: certificate %s and key %s: %w", certFile, keyFile, err)
}

// LoadPool reads a PEM file of CA certificates.
func LoadPool(file string) (*x509.CertPool, error) {
	b, err := livefile.Read(file, MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("certs: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("certs: CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

// current returns the state in force, re-reading the files first when they
// changed since the last attempt.
func (s *Server) current() *state { return s.v.Current() }

// Config returns the listener's tls.Config, offering nextProtos by ALPN
// ("h2" and "http/1.1" for HTTP, "h2" for gRPC). Each handshake gets the
// certificates in force at that moment.
func (s *Server) Config(nextProtos ...string) *tls.Config {
	key := strings.Join(nextProtos, ",")
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st := s.current()
			st.mu.Lock()
			defer st.mu.Unlock()
			if c := st.cfgs[key]; c != nil {
				return c, nil
			}
			c := s.build(st, nextProtos)
			st.cfgs[key] = c
			return c, nil
		},
	}
}

func (s *Server) build(st *state, nextProtos []string) *tls.Config {
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   nextProtos,
		Certificates: []tls.Certificate{*st.cert},
	}
	if st.pool != nil {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = st.pool
		c.VerifyConnection = s.verify(st.pool)
	}
	return c
}

// verify checks what the handshake's own verification does not: the
// required SANs, and, on a resumed session (whose client certificate was
// verified when the session began), the chain against the CA in force.
func (s *Server) verify(pool *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("certs: client certificate required")
		}
		leaf := cs.PeerCertificates[0]
		if cs.DidResume {
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				return fmt.Errorf("certs: resumed session's client certificate: %w", err)
			}
		}
		if len(s.opts.ClientSANs) == 0 || HasSAN(leaf, s.opts.ClientSANs) {
			return nil
		}
		return fmt.Errorf("certs: client certificate carries none of the required SANs %q", s.opts.ClientSANs)
	}
}

// HasSAN reports whether c carries one of sans as a DNS name, URI, email
// address or IP address (compared exactly; DNS names without regard to
// case).
func HasSAN(c *x509.Certificate, sans []string) bool {
	for _, want := range sans {
		for _, d := range c.DNSNames {
			if strings.EqualFold(d, want) {
				return true
			}
		}
		for _, u := range c.URIs {
			if u.String() == want {
				return true
			}
		}
		for _, e := range c.EmailAddresses {
			if e == want {
				return true
			}
		}
		for _, ip := range c.IPAddresses {
			if ip.String() == want {
				return true
			}
		}
	}
	return false
}

// ClientOptions name the files of a TLS client (sluice to Redis).
type ClientOptions struct {
	CAFile            string // PEM CA certificates that verify the server; the system's when empty
	CertFile, KeyFile string // a client certificate and key, both or neither
	ServerName        string // the name to verify in the server's certificate; the host dialed when empty
	// SkipNameCheck verifies the server's certificate chain (against
	// CAFile, or the system's roots) but not the name it holds: for
	// servers whose certificates name none of the addresses dialed.
	// ServerName is then sent as SNI only.
	SkipNameCheck bool
	Log           *slog.Logger
}

// NewClient returns a client tls.Config. The client certificate is
// re-read, when its files change, for each new connection; the CA is read
// once.
func NewClient(o ClientOptions) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.CAFile != "" {
		pool, err := LoadPool(o.CAFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if o.SkipNameCheck {
		roots := c.RootCAs // nil: the system's
		// The standard check is off only to be replaced by this one, which
		// is the same but for the name.
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyChain(cs, roots)
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("certs: a client certificate needs its key, and a key its certificate")
	}
	if o.CertFile != "" {
		// A Server without a client CA is a certificate reloader.
		s, err := NewServer(ServerOptions{CertFile: o.CertFile, KeyFile: o.KeyFile, Log: o.Log})
		if err != nil {
			return nil, err
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		}
	}
	return c, nil
}

// verifyChain verifies the server's certificate chain of cs against roots
// (the system's when nil) for server authentication, as crypto/tls does,
// without checking the name it holds.
func verifyChain(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("certs: the server sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	return err
}

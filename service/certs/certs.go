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
// pair, a key that does not match): the error is logged once per change.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
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

// Server holds a listener's certificate, and the client CA under mTLS.
type Server struct {
	opts  ServerOptions
	files []string
	log   *slog.Logger

	mu   sync.Mutex
	sig  []fileSig // of the last attempt, failed or not
	st   *state
	cfgs map[string]*tls.Config // by NextProtos, for st
}

// state is one loaded generation of the files.
type state struct {
	cert *tls.Certificate
	pool *x509.CertPool // nil without a client CA
}

// NewServer loads the files; an error names the file that failed.
func NewServer(o ServerOptions) (*Server, error) {
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("certs: a certificate and a key are both required")
	}
	if len(o.ClientSANs) > 0 && o.ClientCAFile == "" {
		return nil, errors.New("certs: a required client SAN needs a client CA")
	}
	s := &Server{opts: o, files: []string{o.CertFile, o.KeyFile}, log: o.Log}
	if o.ClientCAFile != "" {
		s.files = append(s.files, o.ClientCAFile)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	sig := stats(s.files)
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	s.sig, s.st, s.cfgs = sig, st, map[string]*tls.Config{}
	return s, nil
}

func (s *Server) load() (*state, error) {
	cert, err := tls.LoadX509KeyPair(s.opts.CertFile, s.opts.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: certificate %s and key %s: %w", s.opts.CertFile, s.opts.KeyFile, err)
	}
	st := &state{cert: &cert}
	if s.opts.ClientCAFile != "" {
		if st.pool, err = LoadPool(s.opts.ClientCAFile); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// LoadPool reads a PEM file of CA certificates.
func LoadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
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
func (s *Server) current() *state {
	sig := stats(s.files)
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Equal(sig, s.sig) {
		return s.st
	}
	s.sig = sig
	st, err := s.load()
	if err != nil {
		s.log.Error("TLS files changed but do not load; serving the previous certificates", "err", err)
		return s.st
	}
	s.st, s.cfgs = st, map[string]*tls.Config{}
	s.log.Info("TLS files reloaded", "cert", s.opts.CertFile, "not_after", st.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return st
}

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
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.st != st { // reloaded meanwhile: use the newer one
				st = s.st
			}
			if c := s.cfgs[key]; c != nil {
				return c, nil
			}
			c := s.build(st, nextProtos)
			s.cfgs[key] = c
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
	Log               *slog.Logger
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

// fileSig is what tells that a file changed.
type fileSig struct {
	size, mtime int64
	ino         uint64
	err         bool
}

func stats(files []string) []fileSig {
	sig := make([]fileSig, len(files))
	for i, f := range files {
		fi, err := os.Stat(f) // follows symlinks: a swapped link shows a new inode
		if err != nil {
			sig[i].err = true
			continue
		}
		sig[i] = fileSig{size: fi.Size(), mtime: fi.ModTime().UnixNano(), ino: inode(fi)}
	}
	return sig
}

package certs_test

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/service/certs"
	"github.com/sluicehq/sluice/service/certs/certstest"
)

// handshake runs a TLS handshake of client against srv's config over a
// pipe and returns the certificate the client saw and both sides' errors.
func handshake(t *testing.T, srv *tls.Config, client *tls.Config) (cn string, serr, cerr error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(a, srv)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3 verifies the client after the client's Finished:
			// read once so that a refusal reaches the client.
			s.Write([]byte("x"))
		}
		done <- err
	}()
	c := tls.Client(b, client)
	cerr = c.Handshake()
	if cerr == nil {
		_, cerr = c.Read(make([]byte, 1))
		cn = c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	b.Close()
	return cn, <-done, cerr
}

func TestServerReloadsOnChange(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	one, two := ca.Server(t, "one", "sluice"), ca.Server(t, "two", "sluice")
	certFile, keyFile := one.Write(t, dir, "tls")
	s, err := certs.NewServer(certs.ServerOptions{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.Config("h2")
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "sluice", NextProtos: []string{"h2"}}
	if cn, serr, cerr := handshake(t, cfg, client); cn != "one" || serr != nil || cerr != nil {
		t.Fatalf("first handshake: %q, %v, %v", cn, serr, cerr)
	}
	two.Write(t, dir, "tls")
	if cn, _, _ := handshake(t, cfg, client); cn != "two" {
		t.Errorf("after rewriting the files: served %q, want two", cn)
	}
	// A certificate written without its key: the pair does not match, the
	// previous one stays; once the key follows, the new pair is served.
	three := ca.Server(t, "three", "sluice")
	certstest.WriteFile(t, certFile, three.CertPEM)
	if cn, _, _ := handshake(t, cfg, client); cn != "two" {
		t.Errorf("with a new certificate and the old key: served %q, want two (kept)", cn)
	}
	certstest.WriteFile(t, keyFile, three.KeyPEM)
	if cn, _, _ := handshake(t, cfg, client); cn != "three" {
		t.Errorf("once the key follows: served %q, want three", cn)
	}
	// A missing file keeps the pair too.
	os.Remove(keyFile)
	if cn, _, _ := handshake(t, cfg, client); cn != "three" {
		t.Errorf("with the key file gone: served %q, want three (kept)", cn)
	}
}

func TestServerClientCAAndSANs(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "srv", "sluice").Write(t, dir, "tls")
	caFile := ca.Write(t, dir, "ca")
	s, err := certs.NewServer(certs.ServerOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile,
		ClientSANs: []string{"spiffe://td/envoy", "ops@example.org", "10.1.2.3", "edge.example.org"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		sans []string
		ok   bool
	}{
		{"URI", []string{"spiffe://td/envoy"}, true},
		{"email", []string{"ops@example.org"}, true},
		{"IP", []string{"10.1.2.3"}, true},
		{"DNS, other case", []string{"EDGE.example.org"}, true},
		{"none of them", []string{"spiffe://td/other", "x.example.org"}, false},
		{"no SAN", nil, false},
	} {
		client := &tls.Config{RootCAs: ca.Pool(), ServerName: "sluice", Certificates: []tls.Certificate{ca.Client(t, "c", tt.sans...).TLS}}
		_, serr, cerr := handshake(t, s.Config(), client)
		if tt.ok != (serr == nil && cerr == nil) {
			t.Errorf("%s: server %v, client %v; want ok=%v", tt.name, serr, cerr, tt.ok)
		}
		if !tt.ok && (serr == nil || !strings.Contains(serr.Error(), "required SANs")) {
			t.Errorf("%s: server error %v, want it to name the required SANs", tt.name, serr)
		}
	}
	_, serr, _ := handshake(t, s.Config(), &tls.Config{RootCAs: ca.Pool(), ServerName: "sluice"})
	if serr == nil {
		t.Error("a client without a certificate was admitted")
	}
}

func TestNewServerErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "srv").Write(t, dir, "tls")
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("junk"), 0o600)
	for _, tt := range []struct {
		o    certs.ServerOptions
		want string
	}{
		{certs.ServerOptions{CertFile: certFile}, "both required"},
		{certs.ServerOptions{CertFile: certFile, KeyFile: keyFile, ClientSANs: []string{"x"}}, "needs a client CA"},
		{certs.ServerOptions{CertFile: certFile, KeyFile: junk}, junk},
		{certs.ServerOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: junk}, "holds no PEM certificate"},
		{certs.ServerOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: filepath.Join(dir, "missing")}, "missing"},
	} {
		if _, err := certs.NewServer(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewServer(%+v) = %v, want an error with %q", tt.o, err, tt.want)
		}
	}
}

func TestClientCertificateReloads(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	certFile, keyFile := ca.Client(t, "one").Write(t, dir, "client")
	caFile := ca.Write(t, dir, "ca")
	c, err := certs.NewClient(certs.ClientOptions{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "redis"})
	if err != nil {
		t.Fatal(err)
	}
	if c.RootCAs == nil || c.ServerName != "redis" || c.MinVersion != tls.VersionTLS12 {
		t.Errorf("client config = %+v", c)
	}
	cn := func() string {
		got, err := c.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Leaf.Subject.CommonName
	}
	if got := cn(); got != "one" {
		t.Fatalf("client certificate %q, want one", got)
	}
	ca.Client(t, "two").Write(t, dir, "client")
	if got := cn(); got != "two" {
		t.Errorf("after rotation: client certificate %q, want two", got)
	}
	if _, err := certs.NewClient(certs.ClientOptions{CertFile: certFile}); err == nil {
		t.Error("NewClient with a certificate and no key: no error")
	}
}

// TestServerNamedPipe: a named pipe put at the certificate's path (whose
// opening would block until a writer comes) is refused at once: handshakes
// go on with the certificate in force.
func TestServerNamedPipe(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "one", "sluice").Write(t, dir, "tls")
	s, err := certs.NewServer(certs.ServerOptions{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.Config("h2")
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "sluice", NextProtos: []string{"h2"}}
	mkfifoAt(t, certFile)
	done := make(chan string, 1)
	go func() { cn, _, _ := handshake(t, cfg, client); done <- cn }()
	select {
	case cn := <-done:
		if cn != "one" {
			t.Errorf("with a named pipe at the certificate: served %q, want one (kept)", cn)
		}
	case <-time.After(time.Minute):
		t.Fatal("with a named pipe at the certificate, a handshake still waits after a minute")
	}
}

// TestClientSkipNameCheck: SkipNameCheck accepts a certificate of the
// trusted CA whatever name it holds, and still refuses one of another CA;
// without it, the name is checked.
func TestClientSkipNameCheck(t *testing.T) {
	dir := t.TempDir()
	ca, other := certstest.NewCA(t, "ca"), certstest.NewCA(t, "other")
	caFile := ca.Write(t, dir, "ca")
	named := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "elsewhere", "elsewhere.example").TLS}}
	foreign := &tls.Config{Certificates: []tls.Certificate{other.Server(t, "redis", "redis.example").TLS}}
	for _, tc := range []struct {
		name   string
		srv    *tls.Config
		skip   bool
		wantOK bool
	}{
		{"name mismatch, checked", named, false, false},
		{"name mismatch, not checked", named, true, true},
		{"another CA, name not checked", foreign, true, false},
	} {
		c, err := certs.NewClient(certs.ClientOptions{CAFile: caFile, ServerName: "redis.example", SkipNameCheck: tc.skip})
		if err != nil {
			t.Fatal(err)
		}
		cerr := dialTLS(t, tc.srv, c)
		if (cerr == nil) != tc.wantOK {
			t.Errorf("%s: handshake error %v, want ok %v", tc.name, cerr, tc.wantOK)
		}
		if cerr != nil && !tc.wantOK && !strings.Contains(cerr.Error(), "certificate") {
			t.Errorf("%s: handshake error %v, want one about the certificate", tc.name, cerr)
		}
	}
	// The system's roots when no CA is given: the test's CA is not one.
	c, err := certs.NewClient(certs.ClientOptions{ServerName: "redis.example", SkipNameCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if cerr := dialTLS(t, named, c); cerr == nil {
		t.Error("SkipNameCheck without a CA file accepted a certificate of a CA the system does not trust")
	}
}

// dialTLS runs a TLS handshake of client against a server with srv's
// config on a loopback port (buffered, unlike a pipe, so that a client
// that refuses the server's flight in mid-write does not block it) and
// returns the client's error.
func dialTLS(t *testing.T, srv, client *tls.Config) error {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if c.(*tls.Conn).Handshake() == nil {
			c.Write([]byte("x"))
		}
	}()
	c, err := tls.Dial("tcp", l.Addr().String(), client)
	if err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	l.Close()
	<-done
	return err
}

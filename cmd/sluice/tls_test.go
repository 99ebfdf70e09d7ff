package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/service/certs/certstest"
)

// tlsGet does GET url over a fresh connection with cfg.
func tlsGet(url string, cfg *tls.Config) (int, error) {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// grpcCall makes one ShouldRateLimit over a new TLS connection with cfg.
func grpcCall(addr string, cfg *tls.Config) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "example", Descriptors: rlsDescriptors("remote_address", "10.0.0.1")})
	return err
}

func TestE2EMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "sluice test CA")
	other := certstest.NewCA(t, "another CA")
	certFile, keyFile := ca.Server(t, "sluice", "127.0.0.1").Write(t, dir, "server")
	caFile := ca.Write(t, dir, "ca")
	const san = "spiffe://example.org/ns/edge/sa/envoy"
	p := start(t, nil, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile,
		"--tls-client-san", "other.example.org, "+san, "--admin", "127.0.0.1:0")
	admin := "https://" + p.logAddr(t, "admin listener")
	https := strings.Replace(p.http, "http://", "https://", 1)

	good := ca.Client(t, "envoy", san)
	client := func(l *certstest.Leaf) *tls.Config {
		c := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
		if l != nil {
			c.Certificates = []tls.Certificate{l.TLS}
		}
		return c
	}
	for _, tt := range []struct {
		name string
		cfg  *tls.Config
		ok   bool
	}{
		{"client certificate with the SAN", client(good), true},
		{"second SAN of the list", client(ca.Client(t, "other", "other.example.org")), true},
		{"no client certificate", client(nil), false},
		{"wrong SAN", client(ca.Client(t, "intruder", "spiffe://example.org/ns/edge/sa/intruder")), false},
		{"other CA", client(other.Client(t, "envoy", san)), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, url := range []string{https + "/healthz", admin + "/metrics"} {
				code, err := tlsGet(url, tt.cfg)
				if tt.ok && (err != nil || code != 200) {
					t.Errorf("GET %s = %d, %v; want 200", url, code, err)
				}
				if !tt.ok && err == nil {
					t.Errorf("GET %s = %d, want the handshake refused", url, code)
				}
			}
			err := grpcCall(p.grpc, tt.cfg)
			if tt.ok && err != nil {
				t.Errorf("ShouldRateLimit: %v", err)
			}
			if !tt.ok && err == nil {
				t.Error("ShouldRateLimit succeeded, want the handshake refused")
			}
		})
	}
	// Plain text is not served on a TLS port.
	if resp, err := http.Get(p.http + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP GET /healthz on the TLS port = 200")
		}
	}
	// The data plane has no /metrics with --admin, over TLS too.
	if code, err := tlsGet(https+"/metrics", client(good)); err != nil || code != 404 {
		t.Errorf("GET /metrics on --http with --admin = %d, %v; want 404", code, err)
	}
}

// kubeSecret writes files the way a Kubernetes secret volume does: each name
// is a symlink to ..data/name, and ..data is a symlink to a timestamped
// directory that a rotation replaces by renaming a new link over it.
type kubeSecret struct {
	dir string
	gen int
}

func (k *kubeSecret) write(t *testing.T, files map[string][]byte) {
	t.Helper()
	k.gen++
	gdir := filepath.Join(k.dir, "..gen"+strings.Repeat("x", k.gen))
	if err := os.Mkdir(gdir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(gdir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(k.dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(k.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gdir), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// servedCN is the common name of the certificate a new connection sees.
func servedCN(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

func TestE2ETLSRotation(t *testing.T) {
	sec := &kubeSecret{dir: t.TempDir()}
	ca1, ca2 := certstest.NewCA(t, "CA one"), certstest.NewCA(t, "CA two")
	one := ca1.Server(t, "one", "127.0.0.1")
	client1 := ca1.Client(t, "client one")
	sec.write(t, map[string][]byte{"tls.crt": one.CertPEM, "tls.key": one.KeyPEM, "ca.crt": ca1.PEM})
	p := start(t, nil, "--tls-cert", filepath.Join(sec.dir, "tls.crt"), "--tls-key", filepath.Join(sec.dir, "tls.key"),
		"--tls-client-ca", filepath.Join(sec.dir, "ca.crt"))
	addr := strings.TrimPrefix(p.http, "http://")
	both := x509.NewCertPool()
	both.AddCert(ca1.Cert)
	both.AddCert(ca2.Cert)
	cfg := func(l *certstest.Leaf) *tls.Config {
		return &tls.Config{RootCAs: both, ServerName: "127.0.0.1", Certificates: []tls.Certificate{l.TLS}}
	}
	if cn := servedCN(t, addr, cfg(client1)); cn != "one" {
		t.Fatalf("served %q, want one", cn)
	}
	// A keep-alive HTTP connection and a gRPC connection, open across the
	// rotation.
	tr := &http.Transport{TLSClientConfig: cfg(client1), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	reused := func() (bool, int) {
		t.Helper()
		var r bool
		req, _ := http.NewRequest("GET", "https://"+addr+"/healthz", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { r = i.Reused }}))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET /healthz: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("GET /healthz over TLS spoke %s, want HTTP/2 (ALPN h2)", resp.Proto)
		}
		return r, resp.StatusCode
	}
	reused()
	gconn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg(client1))))
	if err != nil {
		t.Fatal(err)
	}
	defer gconn.Close()
	rlsc := pb.NewRateLimitServiceClient(gconn)
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := rlsc.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "example", Descriptors: rlsDescriptors("remote_address", "10.0.0.2")})
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}

	// Rotate the certificate and the client CA (a new CA: client one is no
	// longer trusted for new connections).
	two := ca2.Server(t, "two", "127.0.0.1")
	client2 := ca2.Client(t, "client two")
	sec.write(t, map[string][]byte{"tls.crt": two.CertPEM, "tls.key": two.KeyPEM, "ca.crt": ca2.PEM})

	if cn := servedCN(t, addr, cfg(client2)); cn != "two" {
		t.Errorf("after the rotation a new connection was served %q, want two", cn)
	}
	if c, err := tls.Dial("tcp", addr, cfg(client1)); err == nil {
		// TLS 1.3 reports a refused client certificate on the first read.
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("a client of the old CA after the rotation: %v, want its certificate refused", err)
		}
	}
	if r, code := reused(); !r || code != 200 {
		t.Errorf("the HTTP connection opened before the rotation: reused=%v, status %d; want it kept and answering", r, code)
	}
	if err := call(); err != nil {
		t.Errorf("the gRPC connection opened before the rotation: %v", err)
	}
	if err := grpcCall(p.grpc, cfg(client2)); err != nil {
		t.Errorf("a new gRPC connection after the rotation: %v", err)
	}
	// A broken rotation (a key that does not match) keeps the certificates
	// in force.
	sec.write(t, map[string][]byte{"tls.crt": one.CertPEM, "tls.key": two.KeyPEM, "ca.crt": ca2.PEM})
	if cn := servedCN(t, addr, cfg(client2)); cn != "two" {
		t.Errorf("after a mismatched pair was written, served %q, want two (kept)", cn)
	}
	p.waitLog(t, "TLS files changed but do not load")
}

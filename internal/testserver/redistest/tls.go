package redistest

import (
	"net"
	"strconv"
	"testing"
)

// TLSFiles are the PEM files of a TLS redis-server.
type TLSFiles struct {
	Cert, Key string // the server's certificate and key
	CA        string // CA of the client certificates (tls-ca-cert-file)
	// AuthClients requires a client certificate (tls-auth-clients yes).
	AuthClients bool
}

// TLSServer starts a redis-server that also serves TLS on a second free
// port (TLSAddr), with f's files; the plain port (Addr) stays for the
// readiness check and for Do.
func TLSServer(t testing.TB, f TLSFiles, opts ...Option) (i *Instance, tlsAddr string) {
	t.Helper()
	auth := "no"
	if f.AuthClients {
		auth = "yes"
	}
	opts = append(opts, WithArgs("--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-ca-cert-file", f.CA, "--tls-auth-clients", auth))
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	i = newInstance(t, nil, o)
	var port int
	err := i.startFreeWith(func() ([]string, error) {
		p, err := freePort()
		port = p
		return []string{"--tls-port", strconv.Itoa(p)}, err
	})
	if err != nil {
		t.Fatalf("redistest: TLS server: %v", err)
	}
	return i, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// ServerOnPort starts a redis-server on 127.0.0.1:port (one that a test
// reserved earlier, such as the address of a Redis that a process under
// test expects to come up later), waits until it answers PING, and stops it
// when the test ends.
func ServerOnPort(t testing.TB, port int, opts ...Option) *Instance {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	i := newInstance(t, nil, o)
	i.Port, i.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := i.start(nil); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return i
}

// FreePort returns a port that was free on 127.0.0.1 a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

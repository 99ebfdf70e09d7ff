package memcachestore_test

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/memcachestore"
	"github.com/sluicehq/sluice/service/certs/certstest"
)

// TestTLS: a memcached that serves TLS and verifies client certificates
// (ssl_verify_mode=2) decides with the CA, the client certificate and
// the server name given as files (envoyproxy/ratelimit's MEMCACHE_TLS_*),
// or as a tls.Config; without the client certificate, or verifying the
// wrong name, nothing is decided.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "memcached CA")
	srvCert, srvKey := ca.Server(t, "memcached.internal", "memcached.internal").Write(t, dir, "server")
	caFile := ca.Write(t, dir, "ca")
	cliLeaf := ca.Client(t, "sluice")
	cliCert, cliKey := cliLeaf.Write(t, dir, "client")
	m := memcachedtest.Server(t, memcachedtest.WithTLS(memcachedtest.TLSFiles{Cert: srvCert, Key: srvKey, CA: caFile, VerifyClients: true}))
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 2, Period: time.Hour}

	good := []*memcachestore.TLS{
		{CAFile: caFile, CertFile: cliCert, KeyFile: cliKey, ServerName: "memcached.internal"},
		{Config: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cliLeaf.TLS}, ServerName: "memcached.internal"}},
	}
	for i, tc := range good {
		s := open(t, memcachestore.Options{TLS: tc}, m.TLSAddr)
		key := "tls" + string(rune('a'+i))
		if d := allow(t, s, key, lim, 2); !d.Allowed {
			t.Errorf("AllowN over TLS (%d) = %+v, want allowed", i, d)
		}
		if d := allow(t, s, key, lim, 1); d.Allowed {
			t.Errorf("AllowN over TLS (%d) on a full key = %+v, want denied", i, d)
		}
		if name, _ := s.Name(key, lim, 0); value(t, m, name) == "" {
			t.Errorf("no item of the TLS decision (%d)", i)
		}
	}
	bad := []struct {
		name string
		tls  *memcachestore.TLS
		want string
	}{
		{"no client certificate", &memcachestore.TLS{CAFile: caFile, ServerName: "memcached.internal"}, ""},
		{"another name", &memcachestore.TLS{CAFile: caFile, CertFile: cliCert, KeyFile: cliKey, ServerName: "other.internal"}, "other.internal"},
		{"the system's CAs", &memcachestore.TLS{CertFile: cliCert, KeyFile: cliKey, ServerName: "memcached.internal"}, "certificate"},
		{"the host's name", &memcachestore.TLS{CAFile: caFile, CertFile: cliCert, KeyFile: cliKey}, "127.0.0.1"},
	}
	for _, tt := range bad {
		s, err := memcachestore.Open(ctx, memcachestore.Options{Servers: []string{m.TLSAddr}, TLS: tt.tls, Timeout: 5 * time.Second})
		if err == nil {
			_, err = s.AllowN(ctx, "tls-bad", lim, 1)
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
		}
	}
	if _, err := memcachestore.New(ctx, memcachestore.Options{Servers: []string{m.TLSAddr},
		TLS: &memcachestore.TLS{Config: &tls.Config{}, CAFile: caFile}}); err == nil || !strings.Contains(err.Error(), "one way only") {
		t.Errorf("TLS with Config and files: %v, want an error", err)
	}
}

package redisstore

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/service/certs/certstest"
)

func TestParseURLTLSParams(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	caFile := ca.Write(t, dir, "ca")
	cert, key := ca.Client(t, "c").Write(t, dir, "c")
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not pem"), 0o600)

	o, err := parseURL("rediss://127.0.0.1:6380?tls_ca=" + caFile + "&tls_cert=" + cert + "&tls_key=" + key + "&tls_server_name=redis.internal")
	if err != nil {
		t.Fatal(err)
	}
	if c := o.TLSConfig; c == nil || c.ServerName != "redis.internal" || c.RootCAs == nil || len(c.Certificates) != 1 || c.MinVersion != tls.VersionTLS12 {
		t.Errorf("TLS config from the URL = %+v, want the CA, one client certificate and ServerName redis.internal", c)
	}
	o, err = parseURL("rediss://127.0.0.1:6380?tls_ca=" + caFile)
	if err != nil || o.TLSConfig.ServerName != "127.0.0.1" {
		t.Errorf("tls_ca alone: %v, ServerName %q; want the URL's host", err, o.TLSConfig.ServerName)
	}
	for _, tt := range []struct{ url, want string }{
		{"redis://127.0.0.1:6379?tls_ca=" + caFile, "need a rediss:// URL"},
		{"rediss://127.0.0.1:6380?tls_cert=" + cert, "tls_cert and tls_key go together"},
		{"rediss://127.0.0.1:6380?tls_ca=" + junk, "holds no PEM certificate"},
		{"rediss://127.0.0.1:6380?tls_ca=" + filepath.Join(dir, "missing"), "tls_ca"},
		{"rediss://127.0.0.1:6380?tls_cert=" + cert + "&tls_key=" + caFile, "tls_cert, tls_key"},
	} {
		if _, err := parseURL(tt.url); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseURL(%q) = %v, want an error with %q", tt.url, err, tt.want)
		}
	}
}

func TestOpenWithTLSConfigNeedsRediss(t *testing.T) {
	cfg := &tls.Config{ServerName: "x"}
	for _, tt := range []struct{ url, want string }{
		{"redis://127.0.0.1:1", "WithTLSConfig needs a rediss:// URL"},
		{"rediss://127.0.0.1:1?tls_server_name=y", "set TLS one way only"},
	} {
		if _, err := Open(context.Background(), tt.url, WithTLSConfig(cfg)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%q, WithTLSConfig) = %v, want an error with %q", tt.url, err, tt.want)
		}
	}
	if _, err := Open(context.Background(), "rediss://127.0.0.1:1", WithTLSConfig(nil)); err == nil || !strings.Contains(err.Error(), "WithTLSConfig(nil)") {
		t.Errorf("Open(rediss://, WithTLSConfig(nil)) = %v, want an error naming WithTLSConfig(nil)", err)
	}
	c := mergeTLS(&tls.Config{}, &tls.Config{ServerName: "host", InsecureSkipVerify: true})
	if c.ServerName != "host" || !c.InsecureSkipVerify || c.MinVersion != tls.VersionTLS12 {
		t.Errorf("mergeTLS = ServerName %q, skip %v, min %x", c.ServerName, c.InsecureSkipVerify, c.MinVersion)
	}
}

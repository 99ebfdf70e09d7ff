package admin

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/certs/certstest"
)

// TestMTLS serves the admin handler over TLS that asks for a client
// certificate, as sluice serve's admin listener with --admin-client-ca: a
// certificate of the admin CA is the caller, by its subject; one of
// another CA, or none, is refused; with a token file too, a token still
// works without a certificate.
func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	adminCA, otherCA := certstest.NewCA(t, "admin CA"), certstest.NewCA(t, "other CA")
	caFile := adminCA.Write(t, dir, "admin-ca")
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "robot:0123456789abcdef0123\n")

	for _, withToken := range []bool{false, true} {
		auth := Auth{ClientCAFile: caFile}
		if withToken {
			auth.TokenFile = tokens
		}
		f := newFixture(t, memstore.New(), auth)
		srv := httptest.NewUnstartedServer(f.h)
		srvLeaf := adminCA.Server(t, "127.0.0.1", "127.0.0.1")
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{srvLeaf.TLS}, ClientAuth: tls.RequestClientCert}
		srv.StartTLS()
		get := func(leaf *certstest.Leaf, token string) (int, string) {
			t.Helper()
			cfg := &tls.Config{RootCAs: adminCA.Pool()}
			if leaf != nil {
				cfg.Certificates = []tls.Certificate{leaf.TLS}
			}
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
			defer c.CloseIdleConnections()
			req, _ := http.NewRequest("GET", srv.URL+"/admin/extra", nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := get(adminCA.Client(t, "oncall"), ""); code != 200 || body != "extra by CN=oncall" {
			t.Errorf("token=%v: admin CA's client = %d %q, want its subject", withToken, code, body)
		}
		if code, body := get(otherCA.Client(t, "intruder"), ""); code != http.StatusUnauthorized {
			t.Errorf("token=%v: another CA's client = %d %q, want 401", withToken, code, body)
		}
		if code, body := get(nil, ""); code != http.StatusUnauthorized || !strings.Contains(body, "certificate") {
			t.Errorf("token=%v: no certificate = %d %q, want 401", withToken, code, body)
		}
		code, body := get(nil, "0123456789abcdef0123")
		if withToken && (code != 200 || body != "extra by robot") || !withToken && code != http.StatusUnauthorized {
			t.Errorf("token=%v: a bearer token, no certificate = %d %q", withToken, code, body)
		}
		srv.Close()
	}
}

package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/window"
	"github.com/sluicehq/sluice/service/certs/certstest"
)

// TestAdminE2E runs sluice serve with --admin and --admin-token-file, on
// the memory store and on Redis through the tiered stack: inspect shows a
// used-up key, a reset puts it back, and the next decisions admit the full
// limit.
func TestAdminE2E(t *testing.T) {
	t.Run("memory", func(t *testing.T) { adminE2E(t) })
	t.Run("redis-tiered", func(t *testing.T) {
		srv := redistest.Server(t)
		adminE2E(t, "--redis", srv.URL(), "--tiered")
	})
}

func adminE2E(t *testing.T, extra ...string) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "adm.yaml")
	if err := os.WriteFile(cfg, []byte("domain: adm\ndescriptors:\n  - key: user\n    rate_limit:\n      name: per_user\n      unit: hour\n      requests_per_unit: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ops:e2e-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, append([]string{"--config", cfg, "--admin", "127.0.0.1:0", "--admin-token-file", tokens}, extra...)...)
	admin := "http://" + p.logAddr(t, "admin listener")
	call := func(method, path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, admin+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// per_user counts 3 an hour in windows of the wall clock: the
	// sequence runs within one, on the attempt's own user.
	var user string // the last attempt's
	window.Run(t, time.Hour, time.Minute, func(f *window.Findings, attempt int) {
		user = fmt.Sprintf("u%d", attempt+1)
		decide := func(n int) (admitted int) {
			for range n {
				if code, _ := p.post(t, "/json", `{"domain":"adm","descriptors":[{"entries":[{"key":"user","value":"`+user+`"}]}]}`); code == 200 {
					admitted++
				}
			}
			return admitted
		}
		if got := decide(4); got != 3 {
			f.Errorf("admitted %d of 4, want 3", got)
			return
		}
		q := "/admin/v1/inspect?domain=adm&descriptor=user=" + user
		if code, body := call("GET", q, ""); code != http.StatusUnauthorized {
			f.Errorf("inspect without a token = %d %s, want 401", code, body)
		}
		code, body := call("GET", q, "e2e-0123456789abcdef")
		var ins struct {
			Descriptors []struct {
				Rules []struct {
					Rule  struct{ Name string }
					State struct {
						Remaining int
						Over      bool
					}
				}
			}
		}
		if err := json.Unmarshal([]byte(body), &ins); err != nil || code != 200 || len(ins.Descriptors) != 1 || len(ins.Descriptors[0].Rules) != 1 {
			f.Errorf("inspect = %d %s (%v)", code, body, err)
			return
		}
		if r := ins.Descriptors[0].Rules[0]; r.Rule.Name != "per_user" || r.State.Remaining != 0 || !r.State.Over {
			f.Errorf("inspect = %+v, want per_user used up", r)
		}
		if got := decide(1); got != 0 {
			f.Errorf("inspecting admitted a request: %d", got)
			return
		}
		if code, body := call("POST", "/admin/v1/reset?domain=adm&descriptor=user="+user, "e2e-0123456789abcdef"); code != 200 || !strings.Contains(body, `"by": "ops"`) {
			f.Errorf("reset = %d %s", code, body)
			return
		}
		p.waitLog(t, "admin reset")
		if !strings.Contains(p.stderr.String(), "by=ops") {
			f.Errorf("the reset's log line does not name its caller:\n%s", p.stderr)
		}
		if got := decide(4); got != 3 {
			f.Errorf("after the reset, admitted %d of 4, want the full limit 3", got)
		}
	})
	code, body := call("GET", "/admin/v1/config", "e2e-0123456789abcdef")
	if code != 200 || !strings.Contains(body, `"source": "file"`) || !strings.Contains(body, `"name": "per_user"`) || !strings.Contains(body, `"loaded_at"`) {
		t.Errorf("config = %d %s", code, body)
	}
	// /metrics keeps answering without a token.
	if code, _ := call("GET", "/metrics", ""); code != 200 {
		t.Errorf("/metrics = %d, want 200", code)
	}
	// The keys denied most and the status page are mounted behind the
	// same authentication: the user was denied twice (once before the
	// reset, once after).
	for _, path := range []string{"/admin/top?domain=adm", "/admin/"} {
		if code, body := call("GET", path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without a token = %d %s, want 401", path, code, body)
		}
	}
	code, body = call("GET", "/admin/top?domain=adm", "e2e-0123456789abcdef")
	if code != 200 || !strings.Contains(body, `"user=`+user+`"`) || !strings.Contains(body, `"per_user"`) {
		t.Errorf("/admin/top = %d %s, want per_user's key user=%s", code, body, user)
	}
	code, body = call("GET", "/admin/", "e2e-0123456789abcdef")
	if code != 200 || !strings.Contains(body, "per_user") || !strings.Contains(body, "user="+user) {
		t.Errorf("/admin/ = %d, want the status page with per_user and user=%s:\n%s", code, body, user)
	}
}

// TestAdminClientCAE2E runs sluice serve with TLS and --admin-client-ca:
// the admin listener asks for a client certificate and answers one of the
// admin CA, while the data plane needs none.
func TestAdminClientCAE2E(t *testing.T) {
	dir := t.TempDir()
	ca, adminCA := certstest.NewCA(t, "sluice test CA"), certstest.NewCA(t, "admin CA")
	certFile, keyFile := ca.Server(t, "sluice", "127.0.0.1").Write(t, dir, "server")
	p := start(t, nil, "--tls-cert", certFile, "--tls-key", keyFile, "--admin-client-ca", adminCA.Write(t, dir, "admin-ca"), "--admin", "127.0.0.1:0")
	admin := "https://" + p.logAddr(t, "admin listener")
	get := func(url string, leaf *certstest.Leaf) (int, string) {
		t.Helper()
		cfg := &tls.Config{RootCAs: ca.Pool()}
		if leaf != nil {
			cfg.Certificates = []tls.Certificate{leaf.TLS}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		defer c.CloseIdleConnections()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(admin+"/admin/v1/config", adminCA.Client(t, "oncall")); code != 200 || !strings.Contains(body, `"source": "builtin"`) {
		t.Errorf("config with the admin CA's certificate = %d %s", code, body)
	}
	if code, body := get(admin+"/admin/v1/config", ca.Client(t, "envoy")); code != http.StatusUnauthorized {
		t.Errorf("config with another CA's certificate = %d %s, want 401", code, body)
	}
	if code, body := get(admin+"/admin/v1/config", nil); code != http.StatusUnauthorized {
		t.Errorf("config without a certificate = %d %s, want 401", code, body)
	}
	if code, body := get(strings.Replace(p.http, "http://", "https://", 1)+"/healthz", nil); code != 200 {
		t.Errorf("data plane /healthz without a certificate = %d %s", code, body)
	}
}

func TestAdminClientCANeedsTLS(t *testing.T) {
	var stderr strings.Builder
	if code := serve([]string{"--admin", "127.0.0.1:0", "--admin-client-ca", "ca.pem"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--admin-client-ca needs TLS") {
		t.Errorf("serve --admin-client-ca without --tls-cert = %d %q, want 2 and the reason", code, stderr.String())
	}
}

package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/rls"
	"github.com/sluicehq/sluice/service/server"
	"github.com/sluicehq/sluice/service/topk"
)

// topServer serves /admin/top from a tracker with known denials, asking
// for the bearer token "s3cret".
func topServer(t *testing.T, onRequest func(n int64)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	tr, err := topk.New(topk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 7 {
		tr.Denied("shop", "per_tenant", "shop/tenant=acme")
	}
	for range 3 {
		tr.Denied("shop", "per_tenant", "shop/tenant=glo\x1bbex")
	}
	tr.Denied("other", "per_ip", "other/remote_address=10.0.0.1")
	h := topk.Handler(tr, "replica-a")
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/top" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"status":401,"detail":"a valid bearer token is required"}`))
			return
		}
		h.ServeHTTP(w, r)
		if onRequest != nil {
			onRequest(n.Add(1))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func tokenFile(t *testing.T, tok string) string {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTop(t *testing.T) {
	srv, _ := topServer(t, nil)
	var out, errb strings.Builder
	code := run([]string{"top", "--addr", srv.URL, "--token-file", tokenFile(t, "s3cret"), "--domain", "shop", "--n", "5"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := out.String()
	for _, want := range []string{"replica replica-a", "DOMAIN", "shop", "per_tenant", "tenant=acme", "tenant=glo?bex"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "other") || strings.Contains(got, "\x1b") {
		t.Errorf("output has another domain or an escape:\n%q", got)
	}
	lines := strings.Split(got, "\n")
	var acme, globex string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "tenant=acme"):
			acme = strings.Join(strings.Fields(l), " ")
		case strings.Contains(l, "tenant=glo"):
			globex = strings.Join(strings.Fields(l), " ")
		}
	}
	if acme != "shop per_tenant 10 7 0 tenant=acme" || globex != "3 0 tenant=glo?bex" {
		t.Errorf("rows %q and %q, want the domain, rule, denials (10), count 7 error 0; then count 3", acme, globex)
	}
}

func TestTopErrors(t *testing.T) {
	srv, _ := topServer(t, nil)
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--addr", srv.URL, "--token-file", tokenFile(t, "wrong")}, 1, "a valid bearer token is required"},
		{[]string{"--addr", srv.URL}, 1, "401"},
		{[]string{"--addr", srv.URL, "--n", "0"}, 2, "--n must be between 1 and 100"},
		{[]string{"--addr", "ftp://x"}, 1, "--addr"},
		{[]string{"--addr", srv.URL, "--token-file", tokenFile(t, "")}, 1, "is empty"},
		{[]string{"extra"}, 2, "unexpected argument"},
	} {
		var out, errb strings.Builder
		if code := run(append([]string{"top"}, tt.args...), &out, &errb); code != tt.code || !strings.Contains(errb.String(), tt.msg) {
			t.Errorf("top %q: exit %d, %q; want %d and %q", tt.args, code, errb.String(), tt.code, tt.msg)
		}
	}
}

// TestTopWatch checks that --watch clears the screen and prints again each
// interval until its context is done.
func TestTopWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, n := topServer(t, func(n int64) {
		if n == 3 {
			cancel()
		}
	})
	var out strings.Builder
	o := topOptions{addr: srv.URL, tokenFile: tokenFile(t, "s3cret"), n: 3, watch: true, interval: time.Millisecond}
	if err := runTop(ctx, o, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "\x1b[H\x1b[2J"); got < 2 || got > int(n.Load()) {
		t.Errorf("%d screens cleared for %d answers, want at least 2", got, n.Load())
	}
	if c := strings.Count(out.String(), "tenant=acme"); c < 2 {
		t.Errorf("table printed %d times, want at least 2", c)
	}
}

// TestOperatorRoutes serves the routes of a core on the memory store:
// /admin/top answers its denials, /admin/ the page.
func TestOperatorRoutes(t *testing.T) {
	cfg, err := config.Parse("shop.yaml", []byte("domain: shop\ndescriptors:\n  - key: tenant\n    rate_limit: {name: per_tenant, unit: minute, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	defer st.Close()
	m := metrics.New()
	c := &core{st: &storeSet{store: st}, metrics: m}
	c.eng = engine.New(st, cfg, engine.WithObserver(m))
	c.svc = rls.New(c.eng)
	api := server.New(c.svc, st, server.WithMetrics(m))
	routes, stop, err := operatorRoutes(c, api)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for range 3 {
		req := &engine.Request{Domain: "shop", Hits: 1, Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "tenant", Value: "acme"}}}}}
		if _, err := c.eng.Decide(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	for p, h := range routes {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var out, errb strings.Builder
	if code := run([]string{"top", "--addr", srv.URL}, &out, &errb); code != 0 || !strings.Contains(out.String(), "tenant=acme") {
		t.Errorf("sluice top: exit %d %s\n%s", code, errb.String(), out.String())
	}
	res, err := http.Get(srv.URL + "/admin/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`data-ready="true"`, `data-breaker="none"`, `data-key="tenant=acme" data-count="2"`, `data-rule="per_tenant"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/admin/ lacks %s", want)
		}
	}
}

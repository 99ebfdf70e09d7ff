// Package traefik checks examples/traefik: the YAML parses, the
// ForwardAuth middleware points at sluice's GET /v1/auth, and the requests
// Traefik builds from it are limited per client whatever the client sends.
package traefik

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rls"
	"github.com/sluicehq/sluice/service/server"
)

type forwardAuth struct {
	Address            string   `yaml:"address"`
	TrustForwardHeader *bool    `yaml:"trustForwardHeader"`
	AuthRequestHeaders []string `yaml:"authRequestHeaders"`
}

type dynamic struct {
	HTTP struct {
		Middlewares map[string]struct {
			ForwardAuth *forwardAuth `yaml:"forwardAuth"`
		} `yaml:"middlewares"`
		Routers map[string]struct {
			EntryPoints []string `yaml:"entryPoints"`
			Rule        string   `yaml:"rule"`
			Middlewares []string `yaml:"middlewares"`
			Service     string   `yaml:"service"`
		} `yaml:"routers"`
		Services map[string]any `yaml:"services"`
	} `yaml:"http"`
}

type static struct {
	EntryPoints map[string]struct {
		Address          string         `yaml:"address"`
		ForwardedHeaders map[string]any `yaml:"forwardedHeaders"`
	} `yaml:"entryPoints"`
	Providers struct {
		File struct {
			Filename string `yaml:"filename"`
		} `yaml:"file"`
	} `yaml:"providers"`
}

func decode(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// load parses both files and returns the ForwardAuth middleware.
func load(t *testing.T) *forwardAuth {
	t.Helper()
	var s static
	decode(t, "traefik.yml", &s)
	web, ok := s.EntryPoints["web"]
	if !ok || web.Address != ":80" || web.ForwardedHeaders != nil || s.Providers.File.Filename != "/etc/traefik/dynamic.yml" {
		t.Errorf("traefik.yml = %+v, want entry point web on :80 trusting no forwarded headers, and the file provider", s)
	}
	var d dynamic
	decode(t, "dynamic.yml", &d)
	mw, ok := d.HTTP.Middlewares["sluice"]
	if !ok || mw.ForwardAuth == nil {
		t.Fatalf("dynamic.yml has no forwardAuth middleware named sluice: %+v", d.HTTP.Middlewares)
	}
	app, ok := d.HTTP.Routers["app"]
	if !ok || !slices.Contains(app.Middlewares, "sluice") || !slices.Contains(app.EntryPoints, "web") {
		t.Errorf("router app = %+v, want it on entry point web through the sluice middleware", app)
	}
	if _, ok := d.HTTP.Services[app.Service]; !ok {
		t.Errorf("router app's service %q is not defined", app.Service)
	}
	return mw.ForwardAuth
}

func TestConfig(t *testing.T) {
	fa := load(t)
	u, err := url.Parse(fa.Address)
	if err != nil || u.Scheme != "http" || u.Path != "/v1/auth" || u.RawQuery != "" || u.Port() != "8080" {
		t.Errorf("forwardAuth.address = %q, want http://HOST:8080/v1/auth", fa.Address)
	}
	if fa.TrustForwardHeader == nil || *fa.TrustForwardHeader {
		t.Errorf("forwardAuth.trustForwardHeader = %v, want false, written out", fa.TrustForwardHeader)
	}
	// Every header the default --auth-descriptors reads, and not Forwarded,
	// which Traefik passes from the client unchanged.
	for _, src := range server.DefaultAuth().Sources {
		for _, h := range src.Headers {
			if h == "X-Original-Uri" { // nginx's
				continue
			}
			if !slices.Contains(fa.AuthRequestHeaders, h) {
				t.Errorf("forwardAuth.authRequestHeaders %q lacks %s, read by sluice", fa.AuthRequestHeaders, h)
			}
		}
	}
	if slices.Contains(fa.AuthRequestHeaders, "Forwarded") {
		t.Errorf("forwardAuth.authRequestHeaders passes Forwarded, which Traefik does not set")
	}
}

// traefikAuthRequest is the request Traefik sends to the ForwardAuth
// address for a client request from clientAddr carrying hdr, as Traefik's
// entry point (no trusted forwarded headers) and forwardAuth middleware
// build it: the entry point drops the client's X-Forwarded-* and X-Real-Ip
// and sets X-Real-Ip to the client's address; forwardAuth copies the
// authRequestHeaders, sets X-Forwarded-For to the client's address
// (trustForwardHeader false) and X-Forwarded-Uri to the request URI.
func traefikAuthRequest(fa *forwardAuth, traefikAddr, clientAddr, uri string, hdr http.Header) *http.Request {
	in := hdr.Clone()
	for k := range in {
		if k == "X-Real-Ip" || len(k) > 12 && k[:12] == "X-Forwarded-" {
			delete(in, k)
		}
	}
	in.Set("X-Real-Ip", clientAddr)
	u, _ := url.Parse(fa.Address)
	r := httptest.NewRequest("GET", u.Path, nil)
	r.RemoteAddr = traefikAddr + ":40000"
	for _, h := range fa.AuthRequestHeaders {
		if vs := in.Values(h); len(vs) > 0 {
			r.Header[http.CanonicalHeaderKey(h)] = vs
		}
	}
	r.Header.Set("X-Forwarded-For", clientAddr)
	r.Header.Set("X-Forwarded-Uri", uri)
	r.Header.Set("X-Forwarded-Method", "GET")
	return r
}

// TestForwardAuthRequests sends sluice (the built-in example: 20 a minute
// per remote_address) what Traefik sends it for clients that forge every
// forwarding header: each client is limited on its own address.
func TestForwardAuthRequests(t *testing.T) {
	fa := load(t)
	cfg, err := config.Parse("example", config.DefaultExample())
	if err != nil {
		t.Fatal(err)
	}
	// The clock stands still mid-minute: all 50 requests fall in one
	// window of the per-minute fixed window whenever they run.
	now := time.Date(2026, 1, 2, 3, 4, 30, 0, time.UTC)
	st := memstore.New(memstore.WithClock(func() time.Time { return now }))
	t.Cleanup(func() { st.Close() })
	// sluice serve --trusted-proxies 172.18.0.2 (Traefik's address).
	trusted, _ := clientip.ParsePrefixes("172.18.0.2")
	auth := server.DefaultAuth()
	auth.Identity.Trusted = trusted
	s := server.New(rls.New(engine.New(st, cfg)), st, server.WithAuth(auth))

	codes := map[string][]int{}
	for i := range 25 {
		for _, client := range []string{"203.0.113.7", "2001:db8:1:2::7"} {
			forged := http.Header{}
			forged.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i))
			forged.Set("X-Real-Ip", fmt.Sprintf("198.51.100.%d", i))
			forged.Set("Forwarded", fmt.Sprintf("for=198.51.100.%d", i))
			w := httptest.NewRecorder()
			s.ServeHTTP(w, traefikAuthRequest(fa, "172.18.0.2", client, "/app?q=1", forged))
			codes[client] = append(codes[client], w.Code)
			if w.Code == 429 && w.Header().Get("Retry-After") == "" {
				t.Errorf("429 for %s without Retry-After", client)
			}
		}
	}
	for client, got := range codes {
		n := 0
		for _, c := range got {
			if c == 200 {
				n++
			}
		}
		if n != 20 || got[20] != 429 {
			t.Errorf("%s: %d of 25 admitted (%v), want the first 20", client, n, got)
		}
	}
}

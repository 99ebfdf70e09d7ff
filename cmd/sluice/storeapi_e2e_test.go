package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/window"
	"github.com/sluicehq/sluice/remotestore"
	"github.com/sluicehq/sluice/service/certs/certstest"
)

// TestE2EStoreAPI: a home sluice over Redis serves its store API; a
// region's sluice decides through it (--remote-store), and so does a
// library process (remotestore). One quota: the decisions of the three,
// interleaved, count in one place, exactly, for the RLS rules and for
// /v1/check. A caller without the token is refused, and a region whose
// token is wrong decides by its failure mode (closed: denied).
func TestE2EStoreAPI(t *testing.T) {
	r := redistest.Server(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "region-eu:0123456789abcdef0123\nlibrary:fedcba9876543210fedcba\n")
	regionToken := filepath.Join(dir, "region-token")
	writeFile(t, regionToken, "0123456789abcdef0123\n")
	badToken := filepath.Join(dir, "bad-token")
	writeFile(t, badToken, "not-a-token-of-the-home-sluice\n")

	home := start(t, nil, "--config", cfg, "--redis", "redis://"+r.Addr, "--redis-timeout", "5s",
		"--store-api-addr", "127.0.0.1:0", "--store-api-token-file", tokens)
	if home.storeAPI == "" {
		t.Fatal("the ready file has no store_api address")
	}
	home.waitLog(t, "store API listening")
	region := start(t, nil, "--config", cfg, "--remote-store", home.storeAPI, "--remote-store-plaintext",
		"--remote-store-token-file", regionToken, "--remote-store-timeout", "5s")
	region.waitLog(t, `store="remote `+home.storeAPI+` (failover fail_closed)"`)
	lib, err := remotestore.Dial(home.storeAPI, remotestore.WithInsecure(), remotestore.WithToken("fedcba9876543210fedcba"))
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()

	// key1 admits 20 a minute: home, region and the library in turn, one
	// quota. The library decides on the same state as the service's rule
	// (its key and limit), which the first decision's answer reveals.
	// Each sequence counts within one window of a minute, on the
	// attempt's own key; 15 s is far beyond what it takes.
	procs := []*proc{home, region}
	window.Run(t, time.Minute, 15*time.Second, func(f *window.Findings, attempt int) {
		shared := fmt.Sprintf("shared%d", attempt)
		for i := range 24 {
			p := procs[i%2]
			resp := p.should(t, "e2e", 0, d("key1", shared))
			want := pb.RateLimitResponse_OK
			if i >= 20 {
				want = pb.RateLimitResponse_OVER_LIMIT
			}
			if resp.OverallCode != want || (i < 20 && resp.Statuses[0].LimitRemaining != uint32(19-i)) {
				f.Errorf("decision %d (%s): %v, want %v with %d remaining", i, []string{"home", "region"}[i%2], resp, want, max(19-i, 0))
				return
			}
		}
	})

	// /v1/check: the library, the home and the region share each key.
	lim := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 5, Period: time.Minute}
	window.Run(t, time.Minute, 15*time.Second, func(f *window.Findings, attempt int) {
		key := fmt.Sprintf("tenant-7-%d", attempt)
		body := fmt.Sprintf(`{"key":%q,"rate":5,"period":"1m","algorithm":"sliding_window"}`, key)
		for i := range 7 {
			var allowed bool
			switch i % 3 {
			case 0, 1:
				code, b := procs[i%3].post(t, "/v1/check", body)
				if code != 200 {
					f.Errorf("/v1/check %d: %d %s", i, code, b)
					return
				}
				allowed = strings.Contains(b, `"allowed":true`)
				if want := fmt.Sprintf(`"remaining":%d,`, max(4-i, 0)); !strings.Contains(b, want) {
					f.Errorf("/v1/check %d: %s, want %s", i, b, want)
				}
			case 2:
				dec, err := lib.AllowN(context.Background(), "*check/"+key, lim, 1)
				if err != nil {
					f.Errorf("library AllowN: %v", err)
					return
				}
				allowed = dec.Allowed
				if dec.Degraded || (i < 5 && dec.Remaining != 4-i) {
					f.Errorf("library decision %d: %+v, want %d remaining", i, dec, 4-i)
				}
			}
			if allowed != (i < 5) {
				f.Errorf("/v1/check %d (%s): allowed %v, want %v", i, []string{"home", "region", "library"}[i%3], allowed, i < 5)
				return
			}
		}
	})

	// Concurrency limits through the region's /v1/acquire and the
	// library: at most 2 held.
	lib2 := sluice.New(lib)
	p1, d1, err := lib2.Acquire(context.Background(), "*permit/jobs", sluice.ConcurrencyLimit{Max: 2, TTL: time.Minute})
	if err != nil || p1 == nil {
		t.Fatalf("library Acquire: %+v, %v", d1, err)
	}
	if code, b := region.post(t, "/v1/acquire", `{"key":"jobs","max":2,"ttl":"1m"}`); code != 200 {
		t.Fatalf("region /v1/acquire: %d %s", code, b)
	}
	if code, b := home.post(t, "/v1/acquire", `{"key":"jobs","max":2,"ttl":"1m"}`); code != 429 {
		t.Fatalf("home /v1/acquire with 2 held: %d %s, want 429", code, b)
	}

	// Without a token, and with a wrong one: refused, and counted as
	// failures of the store, never as invalid requests.
	anon, err := remotestore.Dial(home.storeAPI, remotestore.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	_, err = anon.AllowN(context.Background(), "k", sluice.PerSecond(1), 1)
	var le *sluice.LimitError
	if err == nil || errors.As(err, &le) || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Errorf("a call without a token: %v, want Unauthenticated", err)
	}
	bad := start(t, nil, "--config", cfg, "--remote-store", home.storeAPI, "--remote-store-plaintext",
		"--remote-store-token-file", badToken, "--remote-store-timeout", "5s")
	bad.waitLog(t, "remote store unreachable at start")
	if resp := bad.should(t, "e2e", 0, d("key1", "other")); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a region with a wrong token: %v, want OVER_LIMIT (fail closed)", resp)
	}
	_, m := home.get(t, "/metrics")
	for _, want := range []string{
		`sluice_store_api_requests_total{code="OK",method="AllowN"}`,
		`sluice_store_api_requests_total{code="Unauthenticated",method="AllowN"}`,
		`sluice_connections_open{listener="store_api"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("home's metrics lack %s:\n%s", want, grepLines(m, "store_api"))
		}
	}
}

// TestE2EStoreAPIMutualTLS: a home sluice serves its store API over TLS
// to the holders of a client certificate of its CA (--store-api-client-ca).
// A region presenting one (--remote-store-tls-cert) decides through it; a
// region presenting another CA's certificate, or none, is refused and
// decides by its failure mode (closed: denied), as does a library without
// a certificate.
func TestE2EStoreAPIMutualTLS(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	ca, other := certstest.NewCA(t, "home CA"), certstest.NewCA(t, "another CA")
	caFile := ca.Write(t, dir, "ca")
	certFile, keyFile := ca.Server(t, "sluice.home", "127.0.0.1").Write(t, dir, "home")
	goodCert, goodKey := ca.Client(t, "region-eu").Write(t, dir, "region-eu")
	badCert, badKey := other.Client(t, "intruder").Write(t, dir, "intruder")

	home := start(t, nil, "--config", cfg, "--tls-cert", certFile, "--tls-key", keyFile,
		"--store-api-addr", "127.0.0.1:0", "--store-api-client-ca", caFile)
	home.waitLog(t, `auth="client certificate"`)
	region := func(extra ...string) *proc {
		return start(t, nil, append([]string{"--config", cfg, "--remote-store", home.storeAPI,
			"--remote-store-tls-ca", caFile, "--remote-store-timeout", "5s"}, extra...)...)
	}
	good := region("--remote-store-tls-cert", goodCert, "--remote-store-tls-key", goodKey)
	intruder := region("--remote-store-tls-cert", badCert, "--remote-store-tls-key", badKey)
	anonymous := region()

	// The refused regions know at start: waited for before the sequence.
	refused := map[string]*proc{"another CA's certificate": intruder, "no certificate": anonymous}
	for _, p := range refused {
		p.waitLog(t, "remote store unreachable at start")
	}
	// key1 admits 20 a minute: the sequence, on the attempt's own key,
	// counts within one window; 15 s is far beyond what it takes.
	window.Run(t, time.Minute, 15*time.Second, func(f *window.Findings, attempt int) {
		mtls := fmt.Sprintf("mtls%d", attempt)
		for i := range 2 {
			resp := good.should(t, "e2e", 0, d("key1", mtls))
			if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != uint32(19-i) {
				f.Errorf("a region with a certificate of the CA, decision %d: %v, want OK with %d remaining", i, resp, 19-i)
				return
			}
		}
		for name, p := range refused {
			if resp := p.should(t, "e2e", 0, d("key1", mtls)); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				f.Errorf("a region with %s: %v, want OVER_LIMIT (refused: fail closed)", name, resp)
			}
		}
		if resp := good.should(t, "e2e", 0, d("key1", mtls)); resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 17 {
			f.Errorf("the region with a certificate after the refused ones: %v, want OK with 17 remaining (nothing counted for them)", resp)
		}
	})
	// The library, with and without the certificate.
	pair, err := tls.LoadX509KeyPair(goodCert, goodKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, withCert := range []bool{true, false} {
		tc := &tls.Config{RootCAs: ca.Pool()}
		if withCert {
			tc.Certificates = []tls.Certificate{pair}
		}
		lib, err := remotestore.Dial(home.storeAPI, remotestore.WithTLSConfig(tc))
		if err != nil {
			t.Fatal(err)
		}
		dec, err := lib.AllowN(context.Background(), "lib", sluice.PerSecond(10), 1)
		lib.Close()
		if withCert && (err != nil || !dec.Allowed) {
			t.Errorf("library with the certificate: %+v, %v", dec, err)
		}
		if !withCert && (err == nil || !strings.Contains(err.Error(), "Unauthenticated")) {
			t.Errorf("library without a certificate: %+v, %v; want Unauthenticated", dec, err)
		}
	}
}

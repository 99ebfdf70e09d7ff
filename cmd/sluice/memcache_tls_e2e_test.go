package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/service/certs/certstest"
)

// TestE2EMemcacheTLSSkipHostname: under the reference's environment,
// MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION=true decides with a memcached
// whose certificate, from the trusted CA, names another host than the one
// dialed; a certificate from another CA is still refused, and without the
// setting the name is checked. SLUICE_FAILURE_MODE=error makes a refused
// connection an error rather than the reference's uncounted answer.
func TestE2EMemcacheTLSSkipHostname(t *testing.T) {
	dir := t.TempDir()
	ca, other := certstest.NewCA(t, "memcached CA"), certstest.NewCA(t, "another CA")
	caFile := ca.Write(t, dir, "ca")
	srvCert, srvKey := ca.Server(t, "memcached.internal", "memcached.internal").Write(t, dir, "server")
	otherCert, otherKey := other.Server(t, "memcached.internal", "memcached.internal", "127.0.0.1").Write(t, dir, "other")
	m := memcachedtest.Server(t, memcachedtest.WithTLS(memcachedtest.TLSFiles{Cert: srvCert, Key: srvKey, CA: caFile}))
	mo := memcachedtest.Server(t, memcachedtest.WithTLS(memcachedtest.TLSFiles{Cert: otherCert, Key: otherKey, CA: caFile}))
	cfg := filepath.Join(dir, "e2e.yaml")
	writeFile(t, cfg, "domain: e2e\ndescriptors:\n  - key: key1\n    rate_limit: {unit: minute, requests_per_unit: 20}\n")
	for _, tc := range []struct {
		name, addr, skip string
		wantOK           bool
	}{
		{"name not checked", m.TLSAddr, "true", true},
		{"name checked", m.TLSAddr, "false", false},
		{"another CA", mo.TLSAddr, "true", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, []string{"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=" + tc.addr, "MEMCACHE_TLS=true",
				"MEMCACHE_TLS_CACERT=" + caFile, "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION=" + tc.skip, "SLUICE_FAILURE_MODE=error",
				"USE_STATSD=false", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0"},
				"--config", cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*rlpb.RateLimitDescriptor{d("key1", "mc-"+tc.skip)}, HitsAddend: 1})
			if tc.wantOK && (err != nil || resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 19) {
				t.Fatalf("decision over TLS: %v, %v; want OK, 19 remaining", resp, err)
			}
			if !tc.wantOK && err == nil {
				t.Fatalf("decision over TLS = %v; want an error (the certificate refused)", resp)
			}
		})
	}
}

package main

import (
	"os"
	"path/filepath"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// TestE2EReferenceEnvMergeDomains: under the reference's environment,
// MERGE_DOMAIN_CONFIG=true lets two files define one domain, and every
// limit of both applies, with a '*' in the middle of a value a wildcard.
func TestE2EReferenceEnvMergeDomains(t *testing.T) {
	rd := redistest.Server(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Limits per year: no window ends during the test.
	writeFile(t, filepath.Join(root, "config", "a.yaml"), "domain: eg\ndescriptors:\n  - {key: generic_key, value: default, rate_limit: {unit: year, requests_per_unit: 3}}\n")
	writeFile(t, filepath.Join(root, "config", "b.yaml"), "domain: eg\ndescriptors:\n  - {key: path, value: \"/api*v1\", share_threshold: true, rate_limit: {unit: year, requests_per_unit: 2}}\n")
	p := start(t, envList(map[string]string{"RUNTIME_ROOT": root, "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": rd.Addr,
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "MERGE_DOMAIN_CONFIG": "true"}))
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := p.should(t, "eg", 1, d("generic_key", "default")).OverallCode; got != want {
			t.Errorf("a.yaml's limit, hit %d: %v, want %v", i+1, got, want)
		}
	}
	// Two values of the shared wildcard count on one counter of 2.
	for i, tt := range []struct {
		value string
		want  pb.RateLimitResponse_Code
	}{{"/api/x/v1", pb.RateLimitResponse_OK}, {"/api-beta-v1", pb.RateLimitResponse_OK}, {"/apiv1", pb.RateLimitResponse_OVER_LIMIT}} {
		if got := p.should(t, "eg", 1, d("path", tt.value)).OverallCode; got != tt.want {
			t.Errorf("b.yaml's limit, hit %d (%s): %v, want %v", i+1, tt.value, got, tt.want)
		}
	}
	p.waitLog(t, "--merge-domains=true")
}

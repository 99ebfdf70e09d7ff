package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestE2EBounds: serve refuses what exceeds its bounds with a 400 or
// InvalidArgument naming the flag, keeps answering on the same key, and
// --memory-max-keys bounds the memory store, counting evictions in
// /metrics.
func TestE2EBounds(t *testing.T) {
	p := start(t, nil, "--max-rate", "1000", "--max-descriptors", "4", "--memory-max-keys", "10")
	// The request that wedged a shard: refused before the store.
	code, body := p.post(t, "/v1/check", `{"key":"x","algorithm":"sliding_log","rate":4503599627370495,"period":"1s","cost":4503599627370495}`)
	if code != 400 || !strings.Contains(body, "rate 4503599627370495 exceeds --max-rate 1000") {
		t.Errorf("POST /v1/check huge sliding log = %d %s, want 400 naming --max-rate", code, body)
	}
	code, body = p.post(t, "/v1/check", `{"key":"x","algorithm":"sliding_log","rate":1000,"period":"1s","cost":1000}`)
	if code != 400 || !strings.Contains(body, "rate 1000 exceeds --max-log-rate 500") || !strings.Contains(body, `"field":"rate"`) {
		t.Errorf("POST /v1/check sliding log of 1000 = %d %s, want 400 naming the rate and --max-log-rate", code, body)
	}
	code, body = p.post(t, "/v1/check", `{"key":"x","algorithm":"sliding_log","rate":500,"period":"1s","cost":500}`)
	if code != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("POST /v1/check sliding log of 500 = %d %s, want 200 allowed", code, body)
	}
	code, body = p.post(t, "/v1/check", "{\"key\":\"x\xff\",\"algorithm\":\"gcra\",\"rate\":1,\"period\":\"1s\"}")
	if code != 400 || !strings.Contains(body, `"field":"key"`) {
		t.Errorf("POST /v1/check key not UTF-8 = %d %s, want 400 naming the key", code, body)
	}

	ds := make([]*rlpb.RateLimitDescriptor, 5)
	for i := range ds {
		ds[i] = d("remote_address", fmt.Sprint("10.0.0.", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "example", Descriptors: ds})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors 5 exceeds --max-descriptors 4") {
		t.Errorf("ShouldRateLimit of 5 descriptors = %v, want InvalidArgument naming --max-descriptors", err)
	}
	if resp := p.should(t, "example", 1, ds[:4]...); resp.OverallCode != pb.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit of 4 descriptors = %v, want OK", resp.OverallCode)
	}

	// 30 keys into a store of 10: 20 or more evictions (the 5 states above
	// and these are all live).
	for i := range 30 {
		if code, body := p.post(t, "/v1/check", fmt.Sprintf(`{"key":"k%d","algorithm":"gcra","rate":5,"period":"1h"}`, i)); code != 200 {
			t.Fatalf("POST /v1/check k%d = %d %s", i, code, body)
		}
	}
	_, metrics := p.get(t, "/metrics")
	var evicted int
	for _, l := range strings.Split(metrics, "\n") {
		if n, err := fmt.Sscanf(l, "sluice_memory_evictions_total %d", &evicted); n == 1 && err == nil {
			break
		}
	}
	if evicted < 20 {
		t.Errorf("sluice_memory_evictions_total = %d after 30 new keys in a store of 10, want >= 20", evicted)
	}
}

// TestE2ELargeSlidingLog: a rule of 100,000 an hour, exact, loads and
// decides, and serve warns at load of what its keys may cost.
func TestE2ELargeSlidingLog(t *testing.T) {
	f := filepath.Join(t.TempDir(), "ratelimit.yaml")
	yaml := "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 100000}\n"
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "--config", f)
	p.waitLog(t, "configuration: rule api.api_key: a sliding_log of 100000 per 1h0m0s keeps up to 100000 entries per key")
	resp := p.should(t, "api", 1000, d("api_key", "k1"))
	if s := resp.GetStatuses(); resp.GetOverallCode() != pb.RateLimitResponse_OK || len(s) != 1 || s[0].GetLimitRemaining() != 99_000 {
		t.Errorf("ShouldRateLimit of 1000 hits = %v, want OK with 99000 remaining", resp)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

const perSecondConfig = `domain: eg
descriptors:
  - key: sec
    rate_limit:
      unit: second
      requests_per_unit: 1000
  - key: min
    rate_limit:
      unit: minute
      requests_per_unit: 2
`

// refRoot writes config as the reference's RUNTIME_ROOT/config/eg.yaml and
// returns RUNTIME_ROOT.
func refRoot(t *testing.T, config string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "config", "eg.yaml"), config)
	return root
}

// redisKeys is every key of rd, one a line.
func redisKeys(t *testing.T, rd *redistest.Instance) string {
	t.Helper()
	keys, err := rd.Do("KEYS", "*")
	if err != nil {
		t.Fatalf("KEYS on %s: %v", rd.Addr, err)
	}
	return keys
}

// TestE2EReferenceEnvPerSecondRedis: with REDIS_PERSECOND, the limits of
// unit second count in REDIS_PERSECOND_URL's Redis and the others in
// REDIS_URL's, alone and in one request; each decides exactly.
func TestE2EReferenceEnvPerSecondRedis(t *testing.T) {
	main, perSec := redistest.Server(t), redistest.Server(t, redistest.WithPassword("ps-pass"))
	p := start(t, envList(map[string]string{
		"RUNTIME_ROOT": refRoot(t, perSecondConfig), "USE_STATSD": "false",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": main.Addr,
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": perSec.Addr,
		"REDIS_PERSECOND_AUTH": "ps-pass", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}))
	p.waitLog(t, "sluice listening")
	log := p.stderr.String()
	for _, want := range []string{"--redis=redis://" + main.Addr, "--redis-persecond=redis://:xxxxx@" + perSec.Addr, "per-second limits in --redis-persecond"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if strings.Contains(log, "ps-pass") {
		t.Error("the log shows REDIS_PERSECOND_AUTH's password")
	}

	if got := p.should(t, "eg", 1, d("sec", "a")).OverallCode; got != pb.RateLimitResponse_OK {
		t.Fatalf("sec=a: %v, want OK", got)
	}
	if got := p.should(t, "eg", 1, d("min", "b")).OverallCode; got != pb.RateLimitResponse_OK {
		t.Fatalf("min=b: %v, want OK", got)
	}
	// One request with a limit in each Redis.
	if got := p.should(t, "eg", 1, d("sec", "c"), d("min", "c")).OverallCode; got != pb.RateLimitResponse_OK {
		t.Fatalf("sec=c and min=c: %v, want OK", got)
	}
	mainKeys, psKeys := redisKeys(t, main), redisKeys(t, perSec)
	for _, k := range []string{"{eg/sec=a}", "{eg/sec=c}"} {
		if !strings.Contains(psKeys, k) || strings.Contains(mainKeys, k) {
			t.Errorf("per-second limit %s: want its key in REDIS_PERSECOND_URL's Redis only\nREDIS_URL's: %q\nREDIS_PERSECOND_URL's: %q", k, mainKeys, psKeys)
		}
	}
	for _, k := range []string{"{eg/min=b}", "{eg/min=c}"} {
		if !strings.Contains(mainKeys, k) || strings.Contains(psKeys, k) {
			t.Errorf("per-minute limit %s: want its key in REDIS_URL's Redis only\nREDIS_URL's: %q\nREDIS_PERSECOND_URL's: %q", k, mainKeys, psKeys)
		}
	}
	// min=c's second hit, then its third: over, through REDIS_URL's count.
	if got := p.should(t, "eg", 1, d("sec", "c"), d("min", "c")).OverallCode; got != pb.RateLimitResponse_OK {
		t.Errorf("second hit of min=c: %v, want OK", got)
	}
	if got := p.should(t, "eg", 1, d("sec", "c"), d("min", "c")).OverallCode; got != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("third hit of min=c (2 a minute): %v, want OVER_LIMIT", got)
	}
}

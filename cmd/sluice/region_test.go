package main

import (
	"testing"
	"time"
)

// TestServeFlagRegion: --region and its settings, by flag and by
// environment; every bad value or combination is refused naming the flag.
func TestServeFlagRegion(t *testing.T) {
	redis := []string{"--redis", "redis://127.0.0.1:1"}
	remote := []string{"--remote-store", "127.0.0.1:1", "--remote-store-plaintext"}
	with := func(base []string, args ...string) []string { return append(append([]string{}, base...), args...) }
	testFlag(t, "region", func(f serveFlags) regionFlags { return f.redis.region }, []flagCase[regionFlags]{
		{"off", nil, nil, regionFlags{refresh: 100 * time.Millisecond, reportTTL: 10 * time.Second, timeoutMin: 200 * time.Millisecond, timeoutMax: 2 * time.Second, leaseTime: time.Second, failOpenShare: 1}, 0, ""},
		{"over redis", nil, with(redis, "--region", "eu-1"), regionFlags{holder: "eu-1", refresh: 100 * time.Millisecond, reportTTL: 10 * time.Second, timeoutMin: 200 * time.Millisecond, timeoutMax: 2 * time.Second, leaseTime: time.Second, failOpenShare: 1}, 0, ""},
		{"over a remote store, every setting", nil, with(remote, "--region", "us", "--region-refresh", "50ms", "--region-report-ttl", "1m",
			"--region-timeout-min", "300ms", "--region-timeout-max", "3s", "--region-lease-time", "2s", "--region-fail-open-share", "0.5",
			"--failure-mode", "open", "--replicas", "6"),
			regionFlags{holder: "us", refresh: 50 * time.Millisecond, reportTTL: time.Minute, timeoutMin: 300 * time.Millisecond, timeoutMax: 3 * time.Second, leaseTime: 2 * time.Second, failOpenShare: 0.5}, 0, ""},
		{"env", map[string]string{"SLUICE_REGION": "ap", "SLUICE_REGION_REFRESH": "20ms", "SLUICE_REDIS": "redis://127.0.0.1:1"}, nil,
			regionFlags{holder: "ap", refresh: 20 * time.Millisecond, reportTTL: 10 * time.Second, timeoutMin: 200 * time.Millisecond, timeoutMax: 2 * time.Second, leaseTime: time.Second, failOpenShare: 1}, 0, ""},
		{"memory store", nil, []string{"--region", "eu"}, regionFlags{}, 2, "--region needs a home store that grants: --redis or --remote-store"},
		{"memcached", nil, []string{"--region", "eu", "--memcache", "127.0.0.1:1"}, regionFlags{}, 2, "--region needs a home store"},
		{"memcached and redis", nil, with(redis, "--region", "eu", "--memcache", "127.0.0.1:1"), regionFlags{}, 2, "--redis and --memcache are alternatives"},
		{"long name", nil, with(redis, "--region", string(make([]byte, 65))), regionFlags{}, 2, "--region: 65 bytes, want 1 to 64"},
		{"settings without --region", nil, with(redis, "--region-refresh", "1s"), regionFlags{}, 2, "--region-* need --region"},
		{"refresh 0", nil, with(redis, "--region", "eu", "--region-refresh", "0s"), regionFlags{}, 2, "--region-refresh 0s: want 1ms to 1m0s"},
		{"refresh 2m", nil, with(redis, "--region", "eu", "--region-refresh", "2m"), regionFlags{}, 2, "--region-refresh 2m0s"},
		{"report ttl 2h", nil, with(redis, "--region", "eu", "--region-report-ttl", "2h"), regionFlags{}, 2, "--region-report-ttl 2h0m0s: want 1ms to 1h0m0s"},
		{"timeout min 0", nil, with(redis, "--region", "eu", "--region-timeout-min", "0s"), regionFlags{}, 2, "--region-timeout-min 0s"},
		{"timeout max below min", nil, with(redis, "--region", "eu", "--region-timeout-min", "1s", "--region-timeout-max", "500ms"), regionFlags{}, 2, "--region-timeout-max 500ms: want --region-timeout-min (1s) to 1m0s"},
		{"timeout max 2m", nil, with(redis, "--region", "eu", "--region-timeout-max", "2m"), regionFlags{}, 2, "--region-timeout-max 2m0s"},
		{"lease time negative", nil, with(redis, "--region", "eu", "--region-lease-time=-1s"), regionFlags{}, 2, "--region-lease-time -1s"},
		{"share above 1", nil, with(redis, "--region", "eu", "--region-fail-open-share", "1.5"), regionFlags{}, 2, "--region-fail-open-share 1.5: want a fraction in [0, 1]"},
		{"share NaN", nil, with(redis, "--region", "eu", "--region-fail-open-share", "NaN"), regionFlags{}, 2, "--region-fail-open-share NaN"},
		{"bad duration env", map[string]string{"SLUICE_REGION_REFRESH": "soon"}, with(redis, "--region", "eu"), regionFlags{}, 2, "SLUICE_REGION_REFRESH"},
		{"tiered", nil, with(redis, "--region", "eu", "--tiered"), regionFlags{}, 2, "--region and --tiered"},
		{"per-second redis", nil, with(redis, "--region", "eu", "--redis-persecond", "redis://127.0.0.1:2"), regionFlags{}, 2, "--region and --redis-persecond"},
		{"failure mode error", nil, with(redis, "--region", "eu", "--failure-mode", "error"), regionFlags{}, 2, "--failure-mode error with --region"},
		{"open without replicas", nil, with(redis, "--region", "eu", "--failure-mode", "open"), regionFlags{}, 2, "--failure-mode open with --region needs --replicas N"},
	})
}

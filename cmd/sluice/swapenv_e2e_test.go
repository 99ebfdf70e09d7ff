package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
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

// keysMade is how many keys rd has made: those it holds and those that
// expired (INFO stats' expired_keys), so that a key of a one-second
// limit counts where it was made however long the caller took to look.
// Both are read in one script, during which no key expires: read apart,
// a key that expired between the two reads counted twice.
func keysMade(t *testing.T, rd *redistest.Instance) int {
	t.Helper()
	out := rd.MustDo("EVAL", "return redis.call('DBSIZE') .. '\\n' .. redis.call('INFO', 'stats')", "0")
	size, info, _ := strings.Cut(out, "\n")
	n, err := strconv.Atoi(strings.TrimSpace(size))
	if err != nil {
		t.Fatalf("DBSIZE on %s: %q: %v", rd.Addr, size, err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "expired_keys:"); ok {
			e, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO stats on %s: expired_keys:%q", rd.Addr, v)
			}
			return n + e
		}
	}
	t.Fatalf("INFO stats on %s has no expired_keys:\n%s", rd.Addr, info)
	return 0
}

// TestE2EReferenceEnvPerSecondRedis: with REDIS_PERSECOND, the limits of
// unit second count in REDIS_PERSECOND_URL's Redis and the others in
// REDIS_URL's, alone and in one request; each decides exactly.
func TestE2EReferenceEnvPerSecondRedis(t *testing.T) {
	main, perSec := redistest.Server(t), redistest.Server(t, redistest.WithPassword("ps-pass"))
	p := start(t, envList(map[string]string{
		"RUNTIME_ROOT": refRoot(t, perSecondConfig), "USE_STATSD": "false",
		// Deadlines that a busy machine cannot pass: the decisions are
		// what is tested.
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": main.Addr, "REDIS_TIMEOUT": "5s",
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": perSec.Addr,
		"REDIS_PERSECOND_AUTH": "ps-pass", "REDIS_PERSECOND_TIMEOUT": "5s", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}))
	p.waitLog(t, "sluice listening")
	log := p.stderr.String()
	for _, want := range []string{"--redis=redis://" + main.Addr, "--redis-persecond=redis://:xxxxx@" + perSec.Addr, "per-second limits in --redis-persecond", "--redis-persecond-timeout=5s"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if strings.Contains(log, "ps-pass") {
		t.Error("the log shows REDIS_PERSECOND_AUTH's password")
	}

	// Each request below is the first on its keys: it makes one key in
	// the Redis of each of its limits' units, and none in the other.
	for _, step := range []struct {
		descs          []*rlpb.RateLimitDescriptor
		perSec, perMin int
	}{
		{[]*rlpb.RateLimitDescriptor{d("sec", "a")}, 1, 0},
		{[]*rlpb.RateLimitDescriptor{d("min", "b")}, 0, 1},
		// One request with a limit in each Redis.
		{[]*rlpb.RateLimitDescriptor{d("sec", "c"), d("min", "c")}, 1, 1},
	} {
		ps0, m0 := keysMade(t, perSec), keysMade(t, main)
		if got := p.should(t, "eg", 1, step.descs...).OverallCode; got != pb.RateLimitResponse_OK {
			t.Fatalf("%v: %v, want OK", step.descs, got)
		}
		ps, m := keysMade(t, perSec)-ps0, keysMade(t, main)-m0
		if ps != step.perSec || m != step.perMin {
			t.Errorf("%v: made %d keys in REDIS_PERSECOND_URL's Redis and %d in REDIS_URL's, want %d and %d", step.descs, ps, m, step.perSec, step.perMin)
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

const memcacheConfig = `domain: eg
descriptors:
  - key: tb
    rate_limit:
      unit: hour
      requests_per_unit: 3
      algorithm: token_bucket
  - key: fw
    rate_limit:
      unit: minute
      requests_per_unit: 1000
`

// TestE2EReferenceEnvMemcache: BACKEND_TYPE=memcache with
// MEMCACHE_HOST_PORT decides in a real memcached; stopped, it decides as
// the reference does then: each request as if nothing had been counted
// (--failure-mode uncounted).
func TestE2EReferenceEnvMemcache(t *testing.T) {
	mc := memcachedtest.Server(t)
	p := start(t, envList(map[string]string{
		"RUNTIME_ROOT": refRoot(t, memcacheConfig), "USE_STATSD": "false",
		"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": mc.Addr, "MEMCACHE_MAX_IDLE_CONNS": "4",
		// A deadline that a busy machine cannot pass (REDIS_TIMEOUT is
		// --redis-timeout, every shared store call's): the decisions are
		// what is tested; stopped, memcached refuses at once.
		"SLUICE_REDIS_TIMEOUT": "5s",
		"REDIS_URL":            "/nonexistent/redis.sock", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}))
	p.waitLog(t, "sluice listening")
	log := p.stderr.String()
	for _, want := range []string{"--memcache=" + mc.Addr, "--memcache-max-idle-conns=4", `store="memcache (failover fail_uncounted)"`, "var=REDIS_URL"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	// 3 an hour, a token bucket: 3 admitted, the 4th denied.
	for i := range 4 {
		want := pb.RateLimitResponse_OK
		if i == 3 {
			want = pb.RateLimitResponse_OVER_LIMIT
		}
		if got := p.should(t, "eg", 1, d("tb", "x")).OverallCode; got != want {
			t.Fatalf("hit %d of tb=x: %v, want %v", i+1, got, want)
		}
	}
	if got := p.should(t, "eg", 1, d("fw", "y")).OverallCode; got != pb.RateLimitResponse_OK {
		t.Fatalf("fw=y: %v, want OK", got)
	}
	// The bucket's state is memcached's item: its TAT, in µs, under the
	// store's prefix and the reference's name of the key.
	if v := mc.MustDo("get sluice:eg_tb_x_:B2s0"); !strings.HasPrefix(v, "VALUE sluice:eg_tb_x_:B2s0 ") {
		t.Errorf("get sluice:eg_tb_x_:B2s0 = %q, want the bucket's item", v)
	}
	// The fixed window's is the reference's item: the key, then the
	// window's start in Unix seconds (this minute's, or the one before if
	// a minute began since), holding the count.
	now := time.Now().Truncate(time.Minute)
	fw := mc.MustDo(fmt.Sprintf("get eg_fw_y_%d", now.Unix())) + mc.MustDo(fmt.Sprintf("get eg_fw_y_%d", now.Add(-time.Minute).Unix()))
	if !strings.Contains(fw, "VALUE eg_fw_y_") || !strings.Contains(fw, "\n1\n") {
		t.Errorf("memcached's items eg_fw_y_<window> = %q, want the count 1", fw)
	}
	if v := mc.MustDo("stats"); !strings.Contains(v, "STAT curr_items 2") {
		t.Errorf("memcached holds other than 2 items:\n%s", v)
	}

	mc.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 3 {
		resp, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "eg", Descriptors: []*rlpb.RateLimitDescriptor{d("fw", "y")}, HitsAddend: 1})
		if err != nil || resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 999 {
			t.Errorf("memcached stopped, hit %d: ShouldRateLimit = %v, %v; want OK, 999 remaining (nothing counted)", i+1, resp, err)
		}
	}
}

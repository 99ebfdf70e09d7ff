package compat

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// startSluiceRefEnv runs sluice serve configured only by the reference's
// environment (referenceEnv: yaml below RUNTIME_ROOT, Redis at rd, the
// listeners on free loopback ports) and extra variables, as it runs when
// installed in the reference's place; it waits until sluice answers gRPC.
func startSluiceRefEnv(t *testing.T, rd *redistest.Instance, yaml string, extra ...string) *service {
	t.Helper()
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(yaml)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, filepath.Base(yaml)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready.json")
	cmd := exec.Command(sluiceBin, "serve", "--ready-file", ready)
	cmd.Env = referenceEnv(root, rd.Addr, uniquePort(t), uniquePort(t), uniquePort(t), extra...)
	s := run(t, "sluice (reference's environment)", cmd)
	var addrs struct{ HTTP, GRPC string }
	for deadline := time.Now().Add(30 * time.Second); ; {
		if b, err := os.ReadFile(ready); err == nil {
			if err := json.Unmarshal(b, &addrs); err != nil {
				t.Fatalf("ready file %q: %v", b, err)
			}
			break
		}
		if s.exited() {
			t.Fatalf("sluice exited before listening: %v\n%s", s.exitErr, tail(s.out.String(), 4000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice did not listen within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.http = "http://" + addrs.HTTP
	if strings.HasPrefix(addrs.GRPC, "/") { // GRPC_UDS
		s.connect(t, "unix://"+addrs.GRPC)
		return s
	}
	if h, _, _ := net.SplitHostPort(addrs.GRPC); h != "127.0.0.1" {
		t.Fatalf("sluice listens on %q, not loopback", addrs.GRPC)
	}
	s.connect(t, addrs.GRPC)
	return s
}

// TestCompatRedisStopped: with its Redis stopped, under the reference's
// environment only, sluice answers ShouldRateLimit as the reference does:
// the gRPC code (Unknown) for Envoy's failure_mode_deny to decide.
func TestCompatRedisStopped(t *testing.T) {
	referenceBin(t)
	yaml, err := filepath.Abs(filepath.Join("testdata", "compat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	refRedis, slRedis := redistest.Server(t), redistest.Server(t)
	// A deadline that a busy machine's first call (loading the script)
	// cannot pass: the answers compared are those of a stopped Redis.
	ref := startReferenceOn(t, refRedis, yaml, "REDIS_TIMEOUT=5s")
	sl := startSluiceRefEnv(t, slRedis, yaml, "REDIS_TIMEOUT=5s")
	req := rq(d("plain", "stopped"))
	for _, s := range []*service{ref, sl} {
		if resp, err := s.should(req); err != nil || resp.OverallCode != ok {
			t.Fatalf("%s with Redis up: %v, %v; want OK", s.name, resp, err)
		}
	}
	refRedis.Kill()
	slRedis.Kill()
	_, refErr := ref.should(req)
	_, slErr := sl.should(req)
	if refCode, slCode := status.Code(refErr), status.Code(slErr); refCode != slCode {
		t.Errorf("Redis stopped: reference answers %v (%v), sluice %v (%v)", refCode, refErr, slCode, slErr)
	} else {
		t.Logf("Redis stopped: both answer gRPC %v", refCode)
	}
}

// spaces is a run of the spaces that protobuf's text form puts at random
// (per binary) between fields.
var spaces = regexp.MustCompile(` +`)

// normalizeLimits rewrites each descriptor's limit (an override in
// protobuf's text form) with single spaces, so that two binaries'
// renderings compare equal when their fields do.
func normalizeLimits(s *structpb.Struct) {
	for _, d := range s.GetFields()["descriptors"].GetListValue().GetValues() {
		f := d.GetStructValue().GetFields()
		if l, ok := f["limit"]; ok {
			f["limit"] = structpb.NewStringValue(spaces.ReplaceAllString(l.GetStringValue(), " "))
		}
	}
}

// TestCompatDynamicMetadata: with RESPONSE_DYNAMIC_METADATA, sluice under
// the reference's environment answers the reference's dynamic_metadata:
// the domain, the descriptors (entries, an override, per-descriptor hits),
// hits_addend, and the quota-mode descriptors over their limit.
func TestCompatDynamicMetadata(t *testing.T) {
	referenceBin(t)
	yaml, err := filepath.Abs(filepath.Join("testdata", "compat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// REDIS_TIMEOUT: a deadline that a busy machine cannot pass.
	ref := startReference(t, yaml, "RESPONSE_DYNAMIC_METADATA=true", "REDIS_TIMEOUT=5s")
	sl := startSluiceRefEnv(t, redistest.Server(t), yaml, "RESPONSE_DYNAMIC_METADATA=true", "REDIS_TIMEOUT=5s")
	c := newChecker(ref, sl)
	tok := tokens(rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 24)))
	quota := d("quota", tok()) // 3 an hour, quota_mode
	withHits := d("plain", tok())
	withHits.HitsAddend = wrapperspb.UInt64(2)
	override := withLimit(d("plain", tok()), 9, typev3.RateLimitUnit_HOUR)
	reqs := []*pb.RateLimitRequest{
		rq(d("plain", tok())),
		rqHits(3, quota),
		rqHits(1, quota, withHits, override, d("unknown_key", "x")), // quota over: a violation
		rq(d("org", tok(), "user", tok())),
	}
	for i, req := range reqs {
		ref, sl := call(t, c, req)
		normalizeLimits(ref.DynamicMetadata)
		normalizeLimits(sl.DynamicMetadata)
		if ref.DynamicMetadata == nil {
			t.Fatalf("request %d: the reference answers no dynamic_metadata", i)
		}
		if diff := cmp.Diff(ref.DynamicMetadata, sl.DynamicMetadata, protocmp.Transform()); diff != "" {
			t.Errorf("request %d: dynamic_metadata (-reference +sluice):\n%s", i, diff)
		}
	}
}

// sameAnswer fails the test when ref and sl answer differently in their
// codes and limit_remaining.
func sameAnswer(t *testing.T, what string, ref, sl *pb.RateLimitResponse) {
	t.Helper()
	if ref.OverallCode != sl.OverallCode || len(ref.Statuses) != len(sl.Statuses) {
		t.Errorf("%s: reference %v, sluice %v", what, ref, sl)
		return
	}
	for i := range ref.Statuses {
		r, s := ref.Statuses[i], sl.Statuses[i]
		if r.Code != s.Code || r.LimitRemaining != s.LimitRemaining {
			t.Errorf("%s: status %d: reference %v, sluice %v", what, i, r, s)
		}
	}
}

// TestCompatGRPCUDS: with GRPC_UDS, both serve gRPC on their Unix socket
// only, and answer a sequence there alike.
func TestCompatGRPCUDS(t *testing.T) {
	referenceBin(t)
	yaml, err := filepath.Abs(filepath.Join("testdata", "compat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ref := startReferenceOn(t, redistest.Server(t), yaml, "GRPC_UDS="+filepath.Join(dir, "ref.sock"), "REDIS_TIMEOUT=5s")
	sl := startSluiceRefEnv(t, redistest.Server(t), yaml, "GRPC_UDS="+filepath.Join(dir, "sluice.sock"), "REDIS_TIMEOUT=5s")
	c := newChecker(ref, sl)
	x := d("plain", tokens(rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 25)))()) // 5 a minute
	awayFromBoundary()
	for i := range 7 {
		ref, sl := call(t, c, rq(x))
		sameAnswer(t, fmt.Sprintf("hit %d", i+1), ref, sl)
	}
}

// TestCompatMemcache: with BACKEND_TYPE=memcache, each on its own real
// memcached, both decide a request alike. Each request is on a fresh key:
// the reference adds a request's hits in the background (its memcached
// increments are asynchronous), so a sequence on one key would compare
// its timing, not its decisions. With memcached stopped, both answer alike
// too, compared in full: the reference decides each request as if nothing
// had been counted (a count it cannot read is 0), and so does sluice under
// its environment (--failure-mode uncounted).
func TestCompatMemcache(t *testing.T) {
	referenceBin(t)
	yaml, err := filepath.Abs(filepath.Join("testdata", "compat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	refMC, slMC := memcachedtest.Server(t), memcachedtest.Server(t)
	ref := startReferenceOn(t, redistest.Server(t), yaml, "BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT="+refMC.Addr)
	// sluice's deadline of every store call (--redis-timeout, 50 ms) raised
	// so that a busy machine cannot pass it; the reference's memcached
	// client waits up to 500 ms, and no variable of its sets either.
	sl := startSluiceRefEnv(t, redistest.Server(t), yaml, "BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT="+slMC.Addr, "SLUICE_REDIS_TIMEOUT=5s")
	c := newChecker(ref, sl)
	tok := tokens(rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 26)))
	awayFromBoundary()
	for _, tc := range []struct {
		what string
		req  *pb.RateLimitRequest
	}{
		{"3 hits of 5 a minute", rqHits(3, d("plain", tok()))},
		{"5 hits of 5", rqHits(5, d("plain", tok()))},
		{"6 hits of 5", rqHits(6, d("plain", tok()))},
		{"two descriptors, one over", rq(d("plain", tok()), d("blocked", tok()))},
		{"nested", rq(d("org", tok(), "user", tok()))},
		{"unlimited", rq(d("unlim", tok()))},
		{"unknown key", rq(d("nosuchkey", tok()))},
	} {
		ref, sl := call(t, c, tc.req)
		sameAnswer(t, tc.what, ref, sl)
	}
	refMC.Kill()
	slMC.Kill()
	// Nothing is counted while memcached is stopped: the same requests on
	// the same keys, again and again, get the same answers.
	x, y := d("plain", tok()), d("org", tok(), "user", tok())
	seq := newSequence("memcached stopped")
	for _, req := range []*pb.RateLimitRequest{
		rqHits(3, x), rqHits(3, x), rqHits(3, x),
		rqHits(5, x), rqHits(6, x), rqHits(0, x), rq(x),
		rq(x, d("blocked", tok())),
		rq(y), rq(y), rqHits(4, y, x),
		rq(d("unlim", tok())), rq(d("nosuchkey", tok())),
		rq(d("shadow", tok())),
	} {
		if o := c.same(t, seq, req); o.failed {
			break
		}
	}
}

package compat

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/testserver/window"
	"github.com/sluicehq/sluice/service/xds/xdstest"
)

// The fields of a configuration file that RateLimitConfig carries; the
// others (quota_mode, share_threshold, value_to_metric) are dropped.
type (
	xdsFile struct {
		Domain      string
		Descriptors []xdsDesc
	}
	xdsDesc struct {
		Key, Value     string
		RateLimit      *xdsLimit `yaml:"rate_limit"`
		Descriptors    []xdsDesc
		ShadowMode     bool `yaml:"shadow_mode"`
		DetailedMetric bool `yaml:"detailed_metric"`
	}
	xdsLimit struct {
		Unit            string
		RequestsPerUnit uint32 `yaml:"requests_per_unit"`
		Unlimited       bool
		Name            string
		Replaces        []struct{ Name string }
	}
)

// xdsConfig is the RateLimitConfig of a configuration file, as a control
// plane would send it; rpu, when not nil, changes a limit by the key's
// name.
func xdsConfig(t *testing.T, file string, rpu func(key string, n uint32) uint32) *rlsconf.RateLimitConfig {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var f xdsFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var conv func([]xdsDesc) []*rlsconf.RateLimitDescriptor
	conv = func(ds []xdsDesc) []*rlsconf.RateLimitDescriptor {
		var out []*rlsconf.RateLimitDescriptor
		for _, d := range ds {
			x := &rlsconf.RateLimitDescriptor{Key: d.Key, Value: d.Value, Descriptors: conv(d.Descriptors),
				ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric}
			if l := d.RateLimit; l != nil {
				unit := rlsconf.RateLimitUnit(rlsconf.RateLimitUnit_value[strings.ToUpper(l.Unit)])
				if l.Unit != "" && unit == rlsconf.RateLimitUnit_UNKNOWN {
					// WEEK, MONTH, YEAR are not in the proto: the
					// descriptor is left out (its requests match nothing).
					continue
				}
				n := l.RequestsPerUnit
				if rpu != nil {
					n = rpu(d.Key, n)
				}
				x.RateLimit = &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: n, Unlimited: l.Unlimited, Name: l.Name}
				for _, r := range l.Replaces {
					x.RateLimit.Replaces = append(x.RateLimit.Replaces, &rlsconf.RateLimitReplace{Name: r.Name})
				}
			}
			out = append(out, x)
		}
		return out
	}
	return &rlsconf.RateLimitConfig{Name: f.Domain, Domain: f.Domain, Descriptors: conv(f.Descriptors)}
}

// TestCompatXDS runs the reference (CONFIG_TYPE=GRPC_XDS_SOTW) and sluice
// (--xds-server) on one xDS control plane, which serves them
// testdata/compat.yaml as a RateLimitConfig, and compares their answers to
// random sequences; halfway, the control plane pushes an update (the
// "plain" limit raised from 5 to 8 a minute) that both apply, then an
// invalid one (the domain in two resources) that both reject. Last, a
// second pair, sluice with --counting all (as under Envoy Gateway's
// environment), must give the same answer to every request of the random
// sequences, denials included.
func TestCompatXDS(t *testing.T) {
	referenceBin(t)
	file, err := filepath.Abs(filepath.Join("testdata", "compat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SLUICE_COMPAT_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SLUICE_COMPAT_SEED: %v", err)
		}
	}
	t.Logf("seed %d (replay with SLUICE_COMPAT_SEED=%d)", seed, seed)
	sequences := max(defaultSequences/3, 1)

	cp := xdstest.Start(t, nil)
	v1 := xdsConfig(t, file, nil)
	cp.Set(t, "ref", "v1", v1)
	cp.Set(t, "sluice", "v1", v1)

	ref := startReference(t, file, "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+cp.Addr, "CONFIG_GRPC_XDS_NODE_ID=ref",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=500ms")
	sl := startSluiceArgs(t, "sluice xds", "--xds-server", cp.Addr, "--xds-node-id", "sluice",
		"--xds-backoff-initial", "100ms", "--xds-backoff-max", "500ms")
	cp.WaitRequest(t, 30*time.Second, xdstest.ACKOf("ref", "v1"))
	cp.WaitRequest(t, 30*time.Second, xdstest.ACKOf("sluice", "v1"))

	c := newChecker(ref, sl)
	t.Run("random before the update", func(t *testing.T) {
		testRandom(t, c, rand.New(rand.NewPCG(seed, 1)), sequences)
	})
	plainLimit(t, c, 5)

	v2 := xdsConfig(t, file, func(key string, n uint32) uint32 {
		if key == "plain" {
			return 8
		}
		return n
	})
	cp.Set(t, "ref", "v2", v2)
	cp.Set(t, "sluice", "v2", v2)
	cp.WaitRequest(t, 30*time.Second, xdstest.ACKOf("ref", "v2"))
	cp.WaitRequest(t, 30*time.Second, xdstest.ACKOf("sluice", "v2"))
	// The reference acknowledges an update before it applies it (its
	// provider hands the configuration to the service on a channel): wait
	// until it answers with the new limit.
	for deadline := time.Now().Add(10 * time.Second); currentLimit(t, ref, "plain") != 8; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reference does not apply v2 within 10s")
		}
	}
	plainLimit(t, c, 8)
	t.Run("random after the update", func(t *testing.T) {
		testRandom(t, c, rand.New(rand.NewPCG(seed, 2)), sequences)
	})

	// An invalid update, the domain in two resources: both reject it
	// (NACK) and go on with v2.
	dup := xdsConfig(t, file, nil)
	dup.Name = "compat-again"
	cp.Set(t, "ref", "v3", v2, dup)
	cp.Set(t, "sluice", "v3", v2, dup)
	for _, node := range []string{"ref", "sluice"} {
		cp.WaitRequest(t, 30*time.Second, func(r *discovery.DiscoveryRequest) bool {
			return r.GetNode().GetId() == node && xdstest.IsNACK("v2")(r)
		})
	}
	plainLimit(t, c, 8)
	c.summary(t)

	// The reference's counting (--counting all, the default when sluice
	// runs with the reference's environment, as under Envoy Gateway): on
	// the same control plane, beside a reference of its own (the random
	// sequences share some counters), every answer is the same, denials
	// included.
	cp.Set(t, "ref-all", "v2", v2)
	cp.Set(t, "sluice-all", "v2", v2)
	refAll := startReference(t, file, "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+cp.Addr, "CONFIG_GRPC_XDS_NODE_ID=ref-all",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=500ms")
	all := startSluiceArgs(t, "sluice xds --counting all", "--xds-server", cp.Addr, "--xds-node-id", "sluice-all",
		"--xds-backoff-initial", "100ms", "--xds-backoff-max", "500ms", "--counting", "all")
	cp.WaitRequest(t, 30*time.Second, xdstest.ACKOf("sluice-all", "v2"))
	for deadline := time.Now().Add(10 * time.Second); currentLimit(t, refAll, "plain") != 8; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second reference does not apply v2 within 10s")
		}
	}
	ca := newChecker(refAll, all)
	t.Run("random, counting all", func(t *testing.T) {
		testRandomAll(t, ca, rand.New(rand.NewPCG(seed, 3)), sequences)
	})
	ca.summary(t)
}

// currentLimit is the requests_per_unit s answers for key=<a fresh value>.
func currentLimit(t *testing.T, s *service, key string) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.rls.ShouldRateLimit(ctx, rq(d(key, "probe-"+time.Now().Format("150405.000000000"))))
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// plainLimit checks that both answer the "plain" limit as n a minute, and
// deny the request past it alike.
func plainLimit(t *testing.T, c *checker, n int) {
	t.Helper()
	inOneMinute(t, func(w window.TB) {
		v := "plain-" + time.Now().Format("150405.000000000")
		for i := range n + 1 {
			ref, sl := call(t, c, rq(d("plain", v)))
			want := pb.RateLimitResponse_OK
			if i == n {
				want = pb.RateLimitResponse_OVER_LIMIT
			}
			for who, r := range map[string]*pb.RateLimitResponse{"reference": ref, "sluice": sl} {
				if r.GetOverallCode() != want || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != uint32(n) {
					w.Errorf("%s: plain request %d: %v (limit %d), want %v (limit %d)", who, i+1, r.GetOverallCode(),
						r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), want, n)
					return
				}
			}
		}
	})
}

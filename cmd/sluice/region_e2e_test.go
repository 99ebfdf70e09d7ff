package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/wait"
	"github.com/sluicehq/sluice/internal/testserver/window"
)

// regionConfig is the regions' configuration: limits per day, so that a
// test's sequence stays in one window of the home store (window.Run).
const regionConfig = `domain: quota
descriptors:
  - key: fixed
    rate_limit: {unit: day, requests_per_unit: 60}
  - key: sliding
    rate_limit: {algorithm: sliding_window, unit: day, requests_per_unit: 30}
  - key: cut
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: left
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: right
    rate_limit: {unit: day, requests_per_unit: 20}
`

// regionNeed is the time a sequence of these tests needs within one
// window: far beyond what it takes on a busy machine.
const regionNeed = 2 * time.Minute

// offer sends n requests for descriptor (key, value) to p from callers
// goroutines at once, and returns how many were admitted; a request that
// fails is reported on f.
func offer(f window.TB, p *proc, key, value string, n, callers int) int {
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < n; i += callers {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "quota", Descriptors: []*rlpb.RateLimitDescriptor{d(key, value)}})
				cancel()
				mu.Lock()
				switch {
				case err != nil:
					f.Errorf("ShouldRateLimit(%s=%s): %v", key, value, err)
				case resp.OverallCode == pb.RateLimitResponse_OK:
					admitted++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return admitted
}

// regionStat reads a counter or gauge of p's /metrics, with its labels as
// written ("" for none).
func regionStat(t *testing.T, p *proc, name, labels string) int {
	t.Helper()
	_, m := p.get(t, "/metrics")
	v, ok := seriesValue(t, m, name+labels)
	if !ok {
		t.Fatalf("/metrics lacks %s%s", name, labels)
	}
	return int(v)
}

// TestE2ERegionsShareOneQuota: three sluice serve regions (--region) hold
// units of one quota from one home store, each offered the whole limit at
// once by several callers (three times the limit in all): in the home
// store's window, what they admit together never exceeds the limit,
// counted exactly, for a fixed window and a sliding window. The home is a
// sluice serve's store API over memory, one over Redis, or Redis itself.
func TestE2ERegionsShareOneQuota(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "quota.yaml")
	writeFile(t, cfg, regionConfig)
	for _, home := range []string{"sluice over memory", "sluice over redis", "redis"} {
		t.Run(home, func(t *testing.T) {
			var homeArgs []string
			switch home {
			case "sluice over memory":
				h := start(t, nil, "--store-api-addr", "127.0.0.1:0")
				homeArgs = []string{"--remote-store", h.storeAPI, "--remote-store-plaintext"}
			case "sluice over redis":
				r := redistest.Server(t)
				h := start(t, nil, "--redis", "redis://"+r.Addr, "--store-api-addr", "127.0.0.1:0")
				homeArgs = []string{"--remote-store", h.storeAPI, "--remote-store-plaintext"}
			case "redis":
				r := redistest.Server(t)
				homeArgs = []string{"--redis", "redis://" + r.Addr}
			}
			var regions []*proc
			for _, name := range []string{"eu", "us", "ap"} {
				// Deadlines far above a busy machine's delays: this test is
				// about the bound, not the failure mode.
				regions = append(regions, start(t, nil, append([]string{"--config", cfg, "--region", name,
					"--region-timeout-min", "5s", "--region-timeout-max", "20s"}, homeArgs...)...))
			}
			regions[0].waitLog(t, `region \"eu\", granted by`)
			for _, lim := range []struct {
				key  string
				rate int
			}{{"fixed", 60}, {"sliding", 30}} {
				window.Run(t, 24*time.Hour, regionNeed, func(f *window.Findings, attempt int) {
					value := fmt.Sprint("v", attempt)
					counts := make([]int, len(regions))
					var wg sync.WaitGroup
					for i, p := range regions {
						wg.Add(1)
						go func() {
							defer wg.Done()
							counts[i] = offer(f, p, lim.key, value, lim.rate, 4)
						}()
					}
					wg.Wait()
					total := counts[0] + counts[1] + counts[2]
					f.Logf("%s, limit %d a day, %d offered to each of 3 regions: admitted %v", lim.key, lim.rate, lim.rate, counts)
					if total > lim.rate {
						f.Errorf("%s: the regions admitted %d (%v) in one window of the home store, limit %d", lim.key, total, counts, lim.rate)
					}
					if total == 0 {
						f.Errorf("%s: nothing admitted", lim.key)
					}
				})
			}
		})
	}
}

// TestE2ERegionSeveralLimits: a request whose descriptors apply two
// limits is decided in the region, from the units held, once its keys
// have had their first answers: the home store decides the first requests
// (one AllowMulti each), and every one after is a local decision (no
// AllowMulti reaches the home store), the scarcer limit admitting no
// more than its own, counted exactly.
func TestE2ERegionSeveralLimits(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "quota.yaml")
	writeFile(t, cfg, regionConfig)
	home := start(t, nil, "--store-api-addr", "127.0.0.1:0")
	// A refresh of 10 s keeps a key's state through any pause of a busy
	// machine between two requests (a key goes idle after four times it).
	p := start(t, nil, "--config", cfg, "--region", "eu", "--region-refresh", "10s",
		"--region-timeout-min", "5s", "--region-timeout-max", "20s",
		"--remote-store", home.storeAPI, "--remote-store-plaintext")
	p.waitLog(t, `region \"eu\", granted by`)
	multis := func() int {
		_, m := home.get(t, "/metrics")
		v, _ := seriesValue(t, m, `sluice_store_api_requests_total{code="OK",method="AllowMulti"}`)
		return int(v)
	}
	local := func() int {
		return regionStat(t, p, "sluice_region_decisions_total", `{way="local"}`) + regionStat(t, p, "sluice_region_decisions_total", `{way="local_denied"}`)
	}
	window.Run(t, 24*time.Hour, regionNeed, func(f *window.Findings, attempt int) {
		v := fmt.Sprint("v", attempt)
		admitted := 0
		ask := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "quota", Descriptors: []*rlpb.RateLimitDescriptor{d("left", v), d("right", v)}})
			switch {
			case err != nil:
				f.Errorf("ShouldRateLimit(left, right): %v", err)
			case resp.OverallCode == pb.RateLimitResponse_OK:
				admitted++
			}
		}
		// Until the first local decision: the home store decides while
		// the keys' first grants are on their way.
		first := 0
		wait.Until(t, "a request decided in the region", func() bool {
			m0, l0 := multis(), local()
			ask()
			first++
			return multis() == m0 && local() == l0+1
		})
		m0, l0 := multis(), local()
		const more = 30
		for range more {
			ask()
		}
		m, l := multis()-m0, local()-l0
		f.Logf("%d requests until the first local decision, then %d: %d local decisions, %d AllowMulti at the home store; %d admitted (limit 20)", first, more, l, m, admitted)
		if m != 0 || l != more {
			f.Errorf("after the keys' first answers, %d of %d requests decided in the region and %d AllowMulti at the home store; want all in the region, none at home", l, more, m)
		}
		if admitted > 20 || admitted < 2 {
			f.Errorf("%d admitted with a limit of 20 a day on one of the two limits, want 2 to 20", admitted)
		}
	})
}

// TestE2ERegionCutOff: a region cut off from the home store (the home
// sluice killed) follows its failure policy: fail open admits from the
// allowance the home store reserved for it, fail closed admits nothing by
// its failure mode (only units it still holds); what the regions admit in
// the window, before and during the cut, stays within the limit, counted
// exactly.
func TestE2ERegionCutOff(t *testing.T) {
	for _, home := range []string{"sluice over memory", "redis"} {
		t.Run(home, func(t *testing.T) { testRegionCutOff(t, home) })
	}
}

func testRegionCutOff(t *testing.T, homeKind string) {
	cfg := filepath.Join(t.TempDir(), "quota.yaml")
	writeFile(t, cfg, regionConfig)
	var homeArgs []string
	var cut func()
	switch homeKind {
	case "sluice over memory":
		home := start(t, nil, "--store-api-addr", "127.0.0.1:0")
		homeArgs = []string{"--remote-store", home.storeAPI, "--remote-store-plaintext"}
		cut = func() {
			home.cmd.Process.Kill()
			<-home.done
		}
	case "redis":
		r := redistest.Server(t)
		// Each region's own deadline to Redis stays above a busy
		// machine's delays: only the kill may fail a call.
		homeArgs = []string{"--redis", "redis://" + r.Addr, "--redis-timeout", "5s"}
		cut = r.Kill
	}
	region := func(name, mode string) *proc {
		// The report stands for an hour: the allowance outlasts any delay
		// of a busy machine between the phases.
		return start(t, nil, append([]string{"--config", cfg,
			"--region", name, "--region-report-ttl", "1h",
			"--failure-mode", mode, "--replicas", "2"}, homeArgs...)...)
	}
	open, closed := region("eu", "open"), region("us", "closed")
	const rate = 1000
	window.Run(t, 24*time.Hour, regionNeed, func(f *window.Findings, attempt int) {
		if attempt > 0 {
			// The home is gone: a sequence cannot start again.
			t.Fatalf("a day's window ended during the test")
		}
		// Connected, each region's first call of the key asks for a part
		// of the limit (its demand not known yet): what is left of its
		// share is its allowance, which the open region admits while cut
		// off.
		before := []int{offer(f, open, "cut", "v", 5, 1), offer(f, closed, "cut", "v", 5, 1)}
		cut()
		// Cut off: each region learns it with its first failed call. A
		// key's units held and its cached denial need none, so each
		// region is asked about new keys (the probes) until it has.
		probes := 0
		for _, p := range []*proc{open, closed} {
			wait.Until(t, "the region to see the home store down", func() bool {
				probes++
				offer(f, p, "cut", fmt.Sprint("probe", probes), 1, 1)
				return regionStat(t, p, "sluice_region_link_down", "") == 1
			})
		}
		during := []int{0, 0}
		for i, p := range []*proc{open, closed} {
			during[i] += offer(f, p, "cut", "v", rate, 2)
		}
		total := before[0] + before[1] + during[0] + during[1]
		f.Logf("limit %d: connected, admitted %v of 5 each; cut off, %v of %d each (open, closed)", rate, before, during, rate)
		if total > rate {
			f.Errorf("the regions admitted %d in one window, limit %d: before the cut %v, during %v", total, rate, before, during)
		}
		openAllowed := regionStat(t, open, "sluice_region_decisions_total", `{way="degraded_allowed"}`)
		closedAllowed := regionStat(t, closed, "sluice_region_decisions_total", `{way="degraded_allowed"}`)
		closedDenied := regionStat(t, closed, "sluice_region_decisions_total", `{way="degraded_denied"}`)
		if openAllowed == 0 {
			f.Errorf("fail open, cut off: nothing admitted by the failure mode, want its allowance")
		}
		if closedAllowed != 0 || closedDenied == 0 {
			f.Errorf("fail closed, cut off: %d admitted and %d denied by the failure mode, want none admitted", closedAllowed, closedDenied)
		}
	})
}

// TestE2ERegionHomeCannotGrant: --region over a home sluice that cannot
// grant (its per-second limits in a second Redis) exits at start, naming
// the flag, instead of failing every decision.
func TestE2ERegionHomeCannotGrant(t *testing.T) {
	r1, r2 := redistest.Server(t), redistest.Server(t)
	home := start(t, nil, "--redis", "redis://"+r1.Addr, "--redis-persecond", "redis://"+r2.Addr, "--store-api-addr", "127.0.0.1:0")
	// Bounded, so that a process that serves instead of exiting fails
	// the test rather than hangs it.
	ctx, cancel := context.WithTimeout(context.Background(), wait.Guard)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
		"--remote-store", home.storeAPI, "--remote-store-plaintext", "--region", "eu").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "--region: the home sluice at --remote-store "+home.storeAPI+" cannot grant") {
		t.Errorf("sluice serve --region over a home that cannot grant: exit %d, output %q; want 1 naming --region", code, out)
	}
}

// TestE2ERegionWarm: --region warms the configuration's counters of fixed
// values at start, so that their first request is decided in the region
// from units already held, without waiting for the home store.
func TestE2ERegionWarm(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "warm.yaml")
	writeFile(t, cfg, `domain: quota
descriptors:
  - key: plan
    value: gold
    rate_limit: {unit: day, requests_per_unit: 20}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 20}
`)
	home := start(t, nil, "--store-api-addr", "127.0.0.1:0")
	day := time.Now().UTC().Truncate(24 * time.Hour)
	p := start(t, nil, "--config", cfg, "--region", "eu", "--region-timeout-min", "5s", "--region-timeout-max", "20s",
		"--remote-store", home.storeAPI, "--remote-store-plaintext")
	p.waitLog(t, `counters of fixed values are warmed" counters=1`)
	if code, body := p.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz after the warming = %d %s, want 200", code, body)
	}
	if n := regionStat(t, p, "sluice_region_home_calls_total", `{result="ok"}`); n != 1 {
		t.Errorf("%d calls to the home store before any request, want 1 (the warming of plan=gold)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "quota", Descriptors: []*rlpb.RateLimitDescriptor{d("plan", "gold")}})
	if err != nil {
		t.Fatal(err)
	}
	local := regionStat(t, p, "sluice_region_decisions_total", `{way="local"}`) + regionStat(t, p, "sluice_region_decisions_total", `{way="local_denied"}`)
	waited := regionStat(t, p, "sluice_region_decisions_total", `{way="wait"}`) + regionStat(t, p, "sluice_region_decisions_total", `{way="wait_denied"}`)
	if local != 1 || waited != 0 {
		t.Errorf("the first request of plan=gold: %d decided from units held, %d waited for the home store; want 1 and 0", local, waited)
	}
	// The warm's units are the day's: spent unless the day ended since.
	if time.Now().UTC().Truncate(24*time.Hour).Equal(day) && resp.OverallCode != pb.RateLimitResponse_OK {
		t.Errorf("the first request of plan=gold = %v, want OK from the units warmed", resp.OverallCode)
	}
}

// gatedGrants holds every Grant until gate is closed, telling entered of
// each one's arrival.
type gatedGrants struct {
	sluice.FullStore
	g       sluice.Granter
	gate    chan struct{}
	entered chan struct{}
}

func (s *gatedGrants) Grant(ctx context.Context, key string, lim sluice.Limit, r sluice.GrantRequest) (sluice.Grant, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return sluice.Grant{}, ctx.Err()
	}
	return s.g.Grant(ctx, key, lim, r)
}

// TestE2ERegionWarmReadiness: while --region warms the configuration's
// counters at start, /readyz answers 503 naming it and gRPC health is not
// serving; once the home store has answered, both report ready.
func TestE2ERegionWarmReadiness(t *testing.T) {
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	home := serveInProcess(t, func(s sluice.Store) sluice.Store {
		return &gatedGrants{FullStore: sluice.Lift(s), g: s.(sluice.Granter), gate: gate, entered: entered}
	}, "--store-api-addr", "127.0.0.1:0")
	cfg := filepath.Join(t.TempDir(), "warm.yaml")
	writeFile(t, cfg, "domain: quota\ndescriptors:\n  - key: plan\n    value: gold\n    rate_limit: {unit: day, requests_per_unit: 20}\n")
	p := start(t, nil, "--config", cfg, "--region", "eu", "--region-timeout-min", "5s", "--region-timeout-max", "1m",
		"--remote-store", home.storeAPI, "--remote-store-plaintext")
	select {
	case <-entered:
	case <-time.After(wait.Guard):
		t.Fatalf("no grant reached the home store within %v", wait.Guard)
	}
	health := func() healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	if code, body := p.get(t, "/readyz"); code != 503 || !strings.Contains(body, "warming the configuration's 1 counters of fixed values at the home store (--region)") {
		t.Errorf("/readyz while warming = %d %q, want 503 naming the warming", code, body)
	}
	if s := health(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health while warming = %v, want NOT_SERVING", s)
	}
	close(gate)
	wait.Until(t, "/readyz 200 once warmed", func() bool {
		code, _ := p.get(t, "/readyz")
		return code == 200
	})
	if s := health(); s != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health once warmed = %v, want SERVING", s)
	}
}

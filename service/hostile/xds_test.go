package hostile

import (
	"fmt"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/service/xds/xdstest"
)

// xdsClass: the configuration comes from an xDS control plane, which
// sends one update holding, besides the class' domain, one resource of
// xdsDescriptors descriptors (about 1 MB, within the default
// --xds-max-message-size of 4 MiB). Once it is in force (a rule of it
// denies), the heap the process obtained from the system
// (go_memstats_heap_sys_bytes: it does not shrink, so it is the high-water
// mark of the heap, however the scheduler ran) has grown by at most
// xdsHeapBound.
var xdsClass = class{
	name:  "xds",
	start: startXDS,
	run:   runXDS,
}

const (
	xdsDescriptors = 50_000
	xdsHeapBound   = 192 << 20
	xdsApplyWithin = time.Minute
)

// xdsServers holds each test's control plane, for its run.
var (
	xdsMu      sync.Mutex
	xdsServers = map[*testing.T]*xdstest.Server{}
)

// xdsHostile is the class' domain over xDS: the rules of hostileConfig
// that the probes use.
func xdsHostile() *rlsconf.RateLimitConfig {
	lim := func(u rlsconf.RateLimitUnit, n uint32) *rlsconf.RateLimitPolicy {
		return &rlsconf.RateLimitPolicy{Unit: u, RequestsPerUnit: n}
	}
	return &rlsconf.RateLimitConfig{Name: "hostile", Domain: "hostile", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "probe", RateLimit: lim(rlsconf.RateLimitUnit_SECOND, 1000)},
		{Key: "hostile", RateLimit: lim(rlsconf.RateLimitUnit_MINUTE, 10)},
		{Key: "f", RateLimit: lim(rlsconf.RateLimitUnit_HOUR, 1000000)},
	}}
}

// startXDS starts the control plane with the class' domain, and sluice on
// it (no --config).
func startXDS(t *testing.T, flags []flagArg) *proc {
	t.Helper()
	cp := xdstest.Start(t, nil)
	cp.Set(t, "default", "1", xdsHostile())
	xdsMu.Lock()
	xdsServers[t] = cp
	xdsMu.Unlock()
	t.Cleanup(func() { xdsMu.Lock(); delete(xdsServers, t); xdsMu.Unlock() })
	all := append(append(append([]flagArg{}, commonFlags...), flags...), flagArg{"xds-server", cp.Addr})
	return startOnce(t, t.TempDir(), all)
}

func runXDS(t *testing.T, h *harness) {
	xdsMu.Lock()
	cp := xdsServers[t]
	xdsMu.Unlock()
	big := &rlsconf.RateLimitConfig{Name: "big", Domain: "big"}
	for i := range xdsDescriptors {
		n := uint32(1000)
		if i == 0 {
			n = 1 // the rule that tells the update is in force
		}
		big.Descriptors = append(big.Descriptors, &rlsconf.RateLimitDescriptor{Key: "k", Value: fmt.Sprint("v", i),
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: n}})
	}
	size := proto.Size(big)
	before, err := h.metric("go_memstats_heap_sys_bytes")
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	cp.Set(t, "default", "2", xdsHostile(), big)
	if err := h.bigInForce(xdsApplyWithin); err != nil {
		t.Fatalf("an update of %d descriptors (%d bytes): %v", xdsDescriptors, size, err)
	}
	took := time.Since(sent)
	after, err := h.metric("go_memstats_heap_sys_bytes")
	if err != nil {
		t.Fatal(err)
	}
	grew := int64(after - before)
	if grew > xdsHeapBound {
		t.Errorf("an xDS update of %d descriptors (%d bytes), in force after %v: the heap obtained from the system grew by %s (%.0fx the update), want at most %s", xdsDescriptors, size, took.Round(time.Millisecond), mib(grew), float64(grew)/float64(size), mib(xdsHeapBound))
	} else {
		t.Logf("an xDS update of %d descriptors (%d bytes): in force after %v, heap high-water mark %+.1f MiB (%.0fx the update)", xdsDescriptors, size, took.Round(time.Millisecond), float64(grew)/(1<<20), float64(grew)/float64(size))
	}
}

// bigInForce sends big's first descriptor (1 an hour) until it is denied:
// the update is in force.
func (h *harness) bigInForce(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := rpcCtx(probeHang)
		resp, err := h.p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "big", Descriptors: []*rlpb.RateLimitDescriptor{desc("k", "v0")}})
		cancel()
		if err == nil && resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
			return nil
		}
		if h.p.exited() {
			return fmt.Errorf("sluice exited: %s", h.p.killReason())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not in force within %v (last: %v, %v)", within, resp.GetOverallCode(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

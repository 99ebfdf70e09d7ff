package main

import (
	"net/http"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/service/xds/xdstest"
)

// TestReadyNeedsConfig: with --ready-needs-config (the reference's
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED), /healthcheck, /readyz and
// gRPC health agree: not ready before a configuration with a domain, ready
// with one, not ready again when a configuration with none is put in
// force.
func TestReadyNeedsConfig(t *testing.T) {
	cp := xdstest.Start(t, nil)
	p := serveInProcess(t, nil, xdsArgs(cp, "--xds-force-start", "--ready-needs-config")...)
	hc := healthpb.NewHealthClient(p.conn)
	state := func() (httpReady, grpcReady bool) {
		t.Helper()
		resp, err := http.Get(p.http + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode == http.StatusOK, r.Status == healthpb.HealthCheckResponse_SERVING
	}
	// waitFor waits until both report want (a configuration is put in
	// force after its ACK, asynchronously).
	waitFor := func(what string, want bool) {
		t.Helper()
		for deadline := time.Now().Add(xdsWait); ; time.Sleep(5 * time.Millisecond) {
			h, g := state()
			if h == want && g == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /healthcheck ready %v, gRPC SERVING %v; want both %v", what, h, g, want)
			}
		}
	}
	if h, g := state(); h || g {
		t.Fatalf("before a configuration: /healthcheck ready %v, gRPC SERVING %v; want neither", h, g)
	}
	cp.Set(t, "sluice-test", "v1", xdsDomain("r1", 1))
	cp.WaitRequest(t, xdsWait, xdstest.IsACK("v1"))
	waitFor("a configuration with a domain", true)
	cp.Set(t, "sluice-test", "v2") // no resource: no domain
	cp.WaitRequest(t, xdsWait, xdstest.IsACK("v2"))
	waitFor("a configuration with no domain", false)
	cp.Set(t, "sluice-test", "v3", xdsDomain("r3", 1))
	cp.WaitRequest(t, xdsWait, xdstest.IsACK("v3"))
	waitFor("a domain again", true)
}

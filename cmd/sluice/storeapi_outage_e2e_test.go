package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/window"
	"github.com/sluicehq/sluice/remotestore"
	"github.com/sluicehq/sluice/stack"
)

// TestE2EStoreAPIOutage: the home sluice, whose store the regions and a
// library decide through, is killed. Each region then decides by its own
// failure policy, as over a Redis that went away: fail open admits its
// share (rate/replicas) and no more, fail closed denies, both marked
// degraded, the breaker open (/readyz fails with --readyz-breaker); the
// library's stack over remotestore does the same. When the home sluice
// serves again on the same address, the regions and the library decide
// through it again, on the home store's counters, which the outage's
// degraded decisions did not touch.
func TestE2EStoreAPIOutage(t *testing.T) {
	r := redistest.Server(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	homeArgs := []string{"--config", cfg, "--redis", "redis://" + r.Addr, "--redis-timeout", "5s"}
	home := start(t, nil, append(homeArgs, "--store-api-addr", "127.0.0.1:0")...)
	addr := home.storeAPI
	region := func(mode string) *proc {
		return start(t, nil, "--config", cfg, "--remote-store", addr, "--remote-store-plaintext",
			"--remote-store-timeout", "5s", "--failure-mode", mode, "--replicas", "2", "--readyz-breaker")
	}
	open, closed := region("open"), region("closed")
	rs, err := remotestore.Dial(addr, remotestore.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	lib, err := stack.New(rs, stack.WithFailover(failover.WithTimeout(5*time.Second), failover.WithReplicas(2), failover.WithFailureThreshold(1)))
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	ctx := context.Background()
	// A bucket that refills one token in 100h: no window edge, no refill
	// within the test.
	libLim := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 6, Period: 600 * time.Hour}

	// key1 admits 20 a minute: the three decide on one counter, in one
	// window of a minute, on the attempt's own key; 10 s is far beyond
	// what the sequence takes.
	window.Run(t, time.Minute, 10*time.Second, func(f *window.Findings, attempt int) {
		key := fmt.Sprintf("outage%d", attempt)
		for i, p := range []*proc{open, closed, home} {
			resp := p.should(t, "e2e", 0, d("key1", key))
			if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != uint32(19-i) {
				f.Errorf("before the outage, decision %d: %v, want OK with %d remaining", i, resp, 19-i)
				return
			}
		}
	})
	if dec, err := lib.AllowN(ctx, "lib", libLim, 1); err != nil || !dec.Allowed || dec.Degraded || dec.Remaining != 5 {
		t.Fatalf("library before the outage: %+v, %v; want admitted by the home store, 5 remaining", dec, err)
	}

	// The home sluice dies.
	home.cmd.Process.Kill()
	<-home.done

	for _, p := range []*proc{open, closed} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			p.should(t, "e2e", 0, d("key1", "probe"))
			if code, _ := p.get(t, "/readyz"); code == 503 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("/readyz of a region did not fail after the home sluice was killed")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// key1 admits 20 a minute; each of 2 replicas 10 while the store is
	// away, counted in one window of a minute on the attempt's own key
	// (degraded<attempt>); 15 s is far beyond what the sequence takes.
	degraded := func(attempt int) string { return fmt.Sprintf("degraded%d", attempt) }
	attempts := 0
	window.Run(t, time.Minute, 15*time.Second, func(f *window.Findings, attempt int) {
		attempts = attempt + 1
		for i := range 12 {
			resp := open.should(t, "e2e", 0, d("key1", degraded(attempt)))
			if want := i < 10; (resp.OverallCode == pb.RateLimitResponse_OK) != want {
				f.Errorf("fail open, decision %d with the home sluice down: %v, want admitted %v (a share of 20/2)", i, resp.OverallCode, want)
				return
			}
			if resp := closed.should(t, "e2e", 0, d("key1", degraded(attempt))); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				f.Errorf("fail closed, decision %d with the home sluice down: %v, want OVER_LIMIT", i, resp.OverallCode)
				return
			}
		}
	})
	// The check after the outage runs on degraded<attempt> too: each
	// of its possible attempts' keys is decided degraded by both regions
	// now, those the sequence above left out included (no window
	// involved: one decision each, nothing checked but that it is made).
	for k := attempts; k < window.Attempts; k++ {
		for _, p := range []*proc{open, closed} {
			p.should(t, "e2e", 0, d("key1", degraded(k)))
		}
	}
	for _, c := range []struct {
		p    *proc
		want string
	}{
		{open, `sluice_degraded_decisions_total{allowed="true",policy="fail_open"}`},
		{open, `sluice_degraded_decisions_total{allowed="false",policy="fail_open"}`},
		{closed, `sluice_degraded_decisions_total{allowed="false",policy="fail_closed"}`},
		{open, "sluice_breaker_open 1"},
		{closed, "sluice_breaker_open 1"},
	} {
		if _, m := c.p.get(t, "/metrics"); !strings.Contains(m, c.want) {
			t.Errorf("a region's metrics with the home sluice down lack %s:\n%s", c.want, grepLines(m, "degraded")+"\n"+grepLines(m, "breaker"))
		}
	}
	// The library: its share of 6/2 with fail open, a denial with fail
	// closed, every decision degraded.
	for i := range 4 {
		dec, err := lib.AllowN(ctx, "lib-open", libLim.WithFailureMode(sluice.FailOpen), 1)
		if err != nil || !dec.Degraded || dec.Allowed != (i < 3) {
			t.Fatalf("library, fail open, decision %d with the home sluice down: %+v, %v; want degraded, admitted %v", i, dec, err, i < 3)
		}
	}
	if dec, err := lib.AllowN(ctx, "lib", libLim.WithFailureMode(sluice.FailClosed), 1); err != nil || dec.Allowed || !dec.Degraded {
		t.Fatalf("library, fail closed, with the home sluice down: %+v, %v; want a degraded denial", dec, err)
	}

	// The home sluice serves again, on the same address.
	start(t, nil, append(homeArgs, "--store-api-addr", addr)...)
	for _, p := range []*proc{open, closed} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if code, _ := p.get(t, "/readyz"); code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("/readyz of a region did not recover after the home sluice came back")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The degraded decisions counted nowhere at home: degraded<attempt>,
	// decided degraded by both regions, is untouched there. Counted in
	// one window of a minute; 10 s is far beyond what the sequence takes.
	window.Run(t, time.Minute, 10*time.Second, func(f *window.Findings, attempt int) {
		for i, p := range []*proc{open, closed} {
			resp := p.should(t, "e2e", 0, d("key1", degraded(attempt)))
			if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != uint32(19-i) {
				f.Errorf("after the home sluice came back, region %d on key1=%s, decided degraded: %v, want OK with %d remaining", i, degraded(attempt), resp, 19-i)
			}
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		dec, err := lib.AllowN(ctx, "lib", libLim, 1)
		if err == nil && !dec.Degraded {
			if !dec.Allowed || dec.Remaining != 4 {
				t.Errorf("library after the home sluice came back: %+v, want admitted with 4 remaining", dec)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the library still decides degraded 10s after the home sluice came back: %+v, %v", dec, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package xds_test

import (
	"context"
	"crypto/tls"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluicehq/sluice/service/certs"
	"github.com/sluicehq/sluice/service/certs/certstest"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/xds"
	"github.com/sluicehq/sluice/service/xds/xdstest"
)

const wait = 20 * time.Second

// domain is a RateLimitConfig of one domain with one limit of rpu a minute.
func domain(name string, rpu uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: name, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: rpu},
	}}}
}

// applied records the configurations a client accepted, as serve does.
type applied struct {
	mu       sync.Mutex
	versions []string
	cfg      *config.Config
	changed  chan struct{}
	attempts map[string]int // Apply calls by version
}

func newApplied() *applied {
	return &applied{changed: make(chan struct{}, 100), attempts: map[string]int{}}
}

func (a *applied) apply(u xds.Update) error {
	a.mu.Lock()
	a.attempts[u.Version]++
	a.mu.Unlock()
	c, err := config.FromXDS(u.Resources)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.versions = append(a.versions, u.Version)
	a.cfg = c
	a.mu.Unlock()
	a.changed <- struct{}{}
	return nil
}

// waitVersion waits until version is the last applied.
func (a *applied) waitVersion(t *testing.T, version string) *config.Config {
	t.Helper()
	deadline := time.After(wait)
	for {
		a.mu.Lock()
		n := len(a.versions)
		var last string
		if n > 0 {
			last = a.versions[n-1]
		}
		c := a.cfg
		a.mu.Unlock()
		if last == version {
			return c
		}
		select {
		case <-a.changed:
		case <-deadline:
			t.Fatalf("version %q not applied within %v (applied: %v)", version, wait, a.versions)
		}
	}
}

func run(t *testing.T, o xds.Options) {
	t.Helper()
	if o.Backoff == (xds.Backoff{}) {
		o.Backoff = xds.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, RandomFactor: 0.5, Jitter: true}
	}
	c, err := xds.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// TestLifecycle: the first snapshot, an update, an invalid update (NACK
// with the error, the configuration in force kept), the control plane going
// away and returning with a new snapshot.
func TestLifecycle(t *testing.T) {
	cp := xdstest.Start(t, nil)
	cp.Set(t, "node-1", "v1", domain("a", 10))
	a := newApplied()
	run(t, xds.Options{Server: cp.Addr, NodeID: "node-1", NodeMetadata: map[string]string{"zone": "z1"},
		Headers: map[string]string{"authorization": "Bearer t0ken", "x-tenant": "acme"}, Apply: a.apply})

	c := a.waitVersion(t, "v1")
	if got := strings.Join(c.Domains(), ","); got != "a" {
		t.Fatalf("v1 domains %q, want a", got)
	}
	cp.WaitRequest(t, wait, xdstest.IsACK("v1"))

	first := cp.Requests()[0]
	if first.GetNode().GetId() != "node-1" || first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue() != "z1" {
		t.Errorf("node %v, want id node-1 and metadata zone=z1", first.GetNode())
	}
	if first.GetTypeUrl() != xds.TypeURL || first.GetVersionInfo() != "" {
		t.Errorf("first request type %q version %q", first.GetTypeUrl(), first.GetVersionInfo())
	}
	h := cp.Headers()[0]
	if got := h.Get("authorization"); len(got) != 1 || got[0] != "Bearer t0ken" {
		t.Errorf("authorization header %q", got)
	}
	if got := h.Get("x-tenant"); len(got) != 1 || got[0] != "acme" {
		t.Errorf("x-tenant header %q", got)
	}

	cp.Set(t, "node-1", "v2", domain("a", 10), domain("b", 5))
	c = a.waitVersion(t, "v2")
	if got := strings.Join(c.Domains(), ","); got != "a,b" {
		t.Fatalf("v2 domains %q, want a,b", got)
	}
	cp.WaitRequest(t, wait, xdstest.IsACK("v2"))

	// Two resources of one domain: rejected, v2 stays.
	dup := domain("b", 7)
	dup.Name = "b-again"
	cp.Set(t, "node-1", "v3", domain("a", 10), domain("b", 5), dup)
	nack := cp.WaitRequest(t, wait, xdstest.IsNACK("v2"))
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, `duplicate domain "b"`) || !strings.Contains(msg, `xds resource "b-again"`) {
		t.Errorf("NACK message %q: want the duplicate domain and the resource", msg)
	}
	// An invalid limit: rejected with the field path, v2 stays.
	bad := domain("c", 1)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	cp.Set(t, "node-1", "v4", domain("a", 10), bad)
	nack = cp.WaitRequest(t, wait, func(r *discovery.DiscoveryRequest) bool {
		return xdstest.IsNACK("v2")(r) && strings.Contains(r.GetErrorDetail().GetMessage(), `xds resource "c"`)
	})
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "descriptors[0].rate_limit") {
		t.Errorf("NACK message %q: want the field path", msg)
	}
	a.mu.Lock()
	if got := strings.Join(a.versions, ","); got != "v1,v2" {
		t.Errorf("applied %q, want v1,v2", got)
	}
	// The control plane answers a NACK with the same response: the
	// client NACKs it again, paced, without applying it again.
	if n := a.attempts["v3"]; n != 1 {
		t.Errorf("v3 applied %d times, want once", n)
	}
	a.mu.Unlock()

	// The control plane goes away, and returns with a new snapshot.
	streams := len(cp.Headers())
	cp.Stop()
	cp.Set(t, "node-1", "v5", domain("d", 3))
	cp.Restart(t)
	c = a.waitVersion(t, "v5")
	if got := strings.Join(c.Domains(), ","); got != "d" {
		t.Fatalf("v5 domains %q, want d", got)
	}
	cp.WaitRequest(t, wait, xdstest.IsACK("v5"))
	hs := cp.Headers()
	if len(hs) <= streams {
		t.Fatalf("no new stream after the restart")
	}
	if got := hs[len(hs)-1].Get("x-tenant"); len(got) != 1 || got[0] != "acme" {
		t.Errorf("x-tenant header after reconnecting %q", got)
	}
	// The new stream subscribed with the version in force (v2, then v5).
	resub := false
	for _, r := range cp.Requests() {
		if r.GetResponseNonce() == "" && r.GetVersionInfo() == "v2" && r.GetNode().GetId() == "node-1" {
			resub = true
		}
	}
	if !resub {
		t.Errorf("no subscription with the version in force after reconnecting: %v", cp.Requests())
	}
}

// TestStartBeforeControlPlane: the control plane is not there at first;
// the client retries with back-off until it is.
func TestStartBeforeControlPlane(t *testing.T) {
	cp := xdstest.Start(t, nil)
	cp.Stop()
	a := newApplied()
	run(t, xds.Options{Server: cp.Addr, NodeID: "n", Apply: a.apply})
	cp.Set(t, "n", "v1", domain("a", 1))
	cp.Restart(t)
	a.waitVersion(t, "v1")
}

func TestTLS(t *testing.T) {
	ca := certstest.NewCA(t, "control plane CA")
	srv := ca.Server(t, "xds.test", "xds.test")
	clientCA := certstest.NewCA(t, "client CA")
	client := clientCA.Client(t, "sluice")
	dir := t.TempDir()
	caFile := ca.Write(t, dir, "ca")
	certFile, keyFile := client.Write(t, dir, "client")

	for _, mtls := range []bool{false, true} {
		name := map[bool]string{false: "TLS", true: "mTLS"}[mtls]
		t.Run(name, func(t *testing.T) {
			sc := &tls.Config{Certificates: []tls.Certificate{srv.TLS}, MinVersion: tls.VersionTLS12}
			if mtls {
				sc.ClientAuth = tls.RequireAndVerifyClientCert
				sc.ClientCAs = clientCA.Pool()
			}
			cp := xdstest.Start(t, sc)
			cp.Set(t, "n", "v1", domain("a", 1))
			co := certs.ClientOptions{CAFile: caFile, ServerName: "xds.test"}
			if mtls {
				co.CertFile, co.KeyFile = certFile, keyFile
			}
			cc, err := certs.NewClient(co)
			if err != nil {
				t.Fatal(err)
			}
			a := newApplied()
			run(t, xds.Options{Server: cp.Addr, NodeID: "n", TLS: cc, Apply: a.apply})
			a.waitVersion(t, "v1")
		})
	}

	// Without the client certificate, mTLS fails: no configuration, and the
	// client keeps trying.
	t.Run("mTLS without a client certificate", func(t *testing.T) {
		sc := &tls.Config{Certificates: []tls.Certificate{srv.TLS}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA.Pool()}
		cp := xdstest.Start(t, sc)
		cp.Set(t, "n", "v1", domain("a", 1))
		cc, err := certs.NewClient(certs.ClientOptions{CAFile: caFile, ServerName: "xds.test"})
		if err != nil {
			t.Fatal(err)
		}
		a := newApplied()
		c, err := xds.New(xds.Options{Server: cp.Addr, TLS: cc, Apply: a.apply,
			Backoff: xds.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		c.Run(ctx)
		if len(a.versions) != 0 || len(cp.Requests()) != 0 {
			t.Fatalf("applied %v, server saw %d requests: want none", a.versions, len(cp.Requests()))
		}
	})
}

func TestBackoff(t *testing.T) {
	b := xds.Backoff{Initial: 10 * time.Second, Max: 60 * time.Second}
	for n, want := range []time.Duration{10, 20, 40, 60, 60, 60} {
		if got := b.Delay(n, nil); got != want*time.Second {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want*time.Second)
		}
	}
	b = xds.DefaultBackoff
	for _, r := range []float64{0, 0.25, 0.5, 0.999} {
		lo, hi := b.Delay(1, func() float64 { return 0 }), b.Delay(1, func() float64 { return 0.999999 })
		if lo != 10*time.Second || hi < 29*time.Second || hi > 30*time.Second {
			t.Errorf("Delay(1) jittered within [%v, %v], want [10s, 30s]", lo, hi)
		}
		if d := b.Delay(5, func() float64 { return r }); d < 30*time.Second || d > 60*time.Second {
			t.Errorf("Delay(5, %v) = %v, want within [30s, 60s]", r, d)
		}
	}
}

func TestOptionsBounds(t *testing.T) {
	apply := func(xds.Update) error { return nil }
	for _, o := range []xds.Options{
		{Apply: apply},
		{Server: "x:1"},
		{Server: "x:1", Apply: apply, MaxMessageSize: -1},
		{Server: "x:1", Apply: apply, MaxMessageSize: xds.MaxMessageSize + 1},
		{Server: "x:1", Apply: apply, Backoff: xds.Backoff{Initial: 2, Max: 1}},
		{Server: "x:1", Apply: apply, Backoff: xds.Backoff{Initial: 1, Max: 2, RandomFactor: 1.5}},
		{Server: "x:1", Apply: apply, Headers: map[string]string{"Upper": "v"}},
		{Server: "x:1", Apply: apply, Headers: map[string]string{"grpc-timeout": "v"}},
		{Server: "x:1", Apply: apply, Headers: map[string]string{"k": "line\nbreak"}},
	} {
		if _, err := xds.New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
}

package source

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/admin"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/xds"
	"github.com/sluicehq/sluice/service/xds/xdstest"
)

// errNoBeta is the Check of the tests: a configuration with a domain
// "beta" fails it.
var errNoBeta = errors.New("domain beta is not allowed here")

func noBeta(c *config.Config) error {
	if slices.Contains(c.Domains(), "beta") {
		return errNoBeta
	}
	return nil
}

// newApplier is an Applier with every recorder, checking noBeta, and its
// engine (with no configuration yet).
func newApplier(t *testing.T) (*Applier, *bytes.Buffer) {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	var log bytes.Buffer
	return &Applier{
		Engine:  engine.New(st, nil),
		Check:   noBeta,
		Metrics: metrics.New(),
		Info:    &admin.ConfigState{},
		Log:     slog.New(slog.NewTextHandler(&log, nil)),
	}, &log
}

// exposition is a's metrics as /metrics serves them.
func exposition(t *testing.T, a *Applier) string {
	t.Helper()
	w := httptest.NewRecorder()
	a.Metrics.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	return w.Body.String()
}

func write(t *testing.T, path, yaml string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Files: a start, a change put in force, a change that fails to load or
// fails the Check (the running configuration stays, the failure is
// recorded once), and a change of content only.
func TestFiles(t *testing.T) {
	a, log := newApplier(t)
	path := filepath.Join(t.TempDir(), "c.yaml")
	write(t, path, "domain: alpha\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	f := &Files{Paths: []string{path}}
	c, err := f.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(c, f.Origin()); err != nil {
		t.Fatal(err)
	}
	a.Engine.SetConfig(c)
	start := f.Origin()
	if start.Source != "file" || len(start.Version) != 12 || a.Info.Info().Version != start.Version {
		t.Errorf("origin %+v, info %+v", start, a.Info.Info())
	}
	f.reload(a, false) // unchanged: nothing happens
	if got := exposition(t, a); strings.Contains(got, "sluice_config_reloads_total") {
		t.Errorf("a start or an unchanged file counted a reload:\n%s", got)
	}

	write(t, path, "domain: gamma\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	f.reload(a, false)
	if got := a.Engine.Config().Domains(); !slices.Equal(got, []string{"gamma"}) {
		t.Fatalf("domains after a change %v, want gamma", got)
	}
	if f.Origin() == start || a.Info.Info().Version != f.Origin().Version || !strings.Contains(log.String(), "configuration loaded from file") {
		t.Errorf("a change: origin %+v, info %+v, log:\n%s", f.Origin(), a.Info.Info(), log)
	}

	for _, bad := range []struct{ yaml, want string }{
		{"domain: [", "c.yaml"},
		{"domain: beta\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", errNoBeta.Error()},
	} {
		write(t, path, bad.yaml)
		f.reload(a, false)
		if got := a.Engine.Config().Domains(); !slices.Equal(got, []string{"gamma"}) {
			t.Errorf("%q: domains %v, want gamma kept", bad.yaml, got)
		}
		if info := a.Info.Info(); !strings.Contains(info.LastError, bad.want) {
			t.Errorf("%q: last error %q, want %q", bad.yaml, info.LastError, bad.want)
		}
		f.reload(a, false) // unchanged since: not tried again
	}
	got := exposition(t, a)
	for _, want := range []string{
		`sluice_config_reloads_total{result="success"} 1` + "\n",
		`sluice_config_reloads_total{result="failure"} 2` + "\n",
		"sluice_config_last_reload_successful 0\n",
		`sluice_config_info{source="file",version="` + a.Info.Info().Version + `"} 1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("metrics lack %q:\n%s", want, got)
		}
	}
	if n := strings.Count(log.String(), "configuration reload failed"); n != 2 {
		t.Errorf("%d failures logged, want 2:\n%s", n, log)
	}
}

// The built-in example without paths, and a Check that refuses a
// configuration at start.
func TestStart(t *testing.T) {
	a, _ := newApplier(t)
	f := &Files{}
	c, err := f.Load()
	if err != nil || f.Origin() != (Origin{"builtin", "example"}) {
		t.Fatalf("the built-in example: %v, %+v", err, f.Origin())
	}
	if err := a.Start(c, f.Origin()); err != nil || a.Info.Info().Source != "builtin" {
		t.Errorf("Start = %v, info %+v", err, a.Info.Info())
	}
	beta, err := config.Parse("b.yaml", []byte("domain: beta\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ = newApplier(t)
	if err := a.Start(beta, Origin{"file", "x"}); !errors.Is(err, errNoBeta) || a.Info.Info().Source != "" {
		t.Errorf("Start of a configuration failing the Check = %v, info %+v; want the Check's error, nothing recorded", err, a.Info.Info())
	}
}

func domain(name string) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: name, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 1},
	}}}
}

// XDS: not ready before a first configuration; each update put in force
// as a reload; one that fails the Check is rejected and recorded, and the
// running configuration stays.
func TestXDS(t *testing.T) {
	const wait = 20 * time.Second
	a, _ := newApplier(t)
	cp := xdstest.Start(t, nil)
	x, err := StartXDS(xds.Options{Server: cp.Addr, NodeID: "n"}, config.Options{}, a)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Stop()
	if ok, why := x.Ready(); ok || why == "" {
		t.Errorf("Ready before a configuration = %v %q", ok, why)
	}
	cp.Set(t, "n", "v1", domain("alpha"))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := x.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := x.Ready(); !ok || !slices.Equal(a.Engine.Config().Domains(), []string{"alpha"}) || a.Info.Info() != (admin.ConfigInfo{Source: "xds", Version: "v1", LoadedAt: a.Info.Info().LoadedAt}) {
		t.Errorf("after v1: ready %v, domains %v, info %+v", ok, a.Engine.Config().Domains(), a.Info.Info())
	}
	cp.Set(t, "n", "v2", domain("beta"))
	nack := cp.WaitRequest(t, wait, xdstest.IsNACK("v1")) // v1 kept
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, errNoBeta.Error()) {
		t.Errorf("NACK %q, want the Check's error", msg)
	}
	if info := a.Info.Info(); info.Version != "v1" || !strings.Contains(info.LastError, errNoBeta.Error()) || !slices.Equal(a.Engine.Config().Domains(), []string{"alpha"}) {
		t.Errorf("after the rejected v2: info %+v, domains %v", info, a.Engine.Config().Domains())
	}
	if got := exposition(t, a); !strings.Contains(got, `sluice_config_reloads_total{result="failure"} 1`) || !strings.Contains(got, `sluice_config_reloads_total{result="success"} 1`) {
		t.Errorf("metrics:\n%s", got)
	}
	// Wait ends with its context.
	x2, err := StartXDS(xds.Options{Server: cp.Addr, NodeID: "nobody"}, config.Options{}, a)
	if err != nil {
		t.Fatal(err)
	}
	defer x2.Stop()
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := x2.Wait(done); !errors.Is(err, ErrNoConfig) {
		t.Errorf("Wait on an ended context = %v, want ErrNoConfig", err)
	}
}

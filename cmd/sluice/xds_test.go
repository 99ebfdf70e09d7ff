package main

import (
	"bytes"
	"crypto/tls"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluicehq/sluice/service/certs/certstest"
	"github.com/sluicehq/sluice/service/xds/xdstest"
)

const xdsWait = 20 * time.Second

// xdsDomain is a RateLimitConfig of domain "xds" whose key k allows rpu an
// hour.
func xdsDomain(name string, rpu uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: "xds", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: rpu},
	}}}
}

// xdsArgs are serve's flags for the control plane cp, with short back-off.
func xdsArgs(cp *xdstest.Server, extra ...string) []string {
	return append([]string{"--xds-server", cp.Addr, "--xds-node-id", "sluice-test",
		"--xds-backoff-initial", "10ms", "--xds-backoff-max", "50ms", "--xds-headers", "x-token=s3cret"}, extra...)
}

// admits checks that value v of key k is admitted rpu times, then denied.
func admits(t *testing.T, should func(*pb.RateLimitRequest) *pb.RateLimitResponse, v string, rpu int) {
	t.Helper()
	req := &pb.RateLimitRequest{Domain: "xds", Descriptors: []*rlpb.RateLimitDescriptor{d("k", v)}, HitsAddend: 1}
	for i := range rpu + 1 {
		want := pb.RateLimitResponse_OK
		if i == rpu {
			want = pb.RateLimitResponse_OVER_LIMIT
		}
		if got := should(req).GetOverallCode(); got != want {
			t.Fatalf("k=%s request %d: %v, want %v (limit %d)", v, i+1, got, want, rpu)
		}
	}
}

// metricsHave waits until /metrics holds every line of want.
func metricsHave(t *testing.T, get func(string) (int, string), want ...string) {
	t.Helper()
	for deadline := time.Now().Add(xdsWait); ; time.Sleep(10 * time.Millisecond) {
		_, body := get("/metrics")
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %q", missing)
		}
	}
}

// TestServeXDS runs serve on an xDS control plane: the first snapshot, an
// update, two invalid updates (NACKed, the configuration in force still
// deciding), the control plane going away and returning with a new one.
func TestServeXDS(t *testing.T) {
	cp := xdstest.Start(t, nil)
	cp.Set(t, "sluice-test", "v1", xdsDomain("r1", 2))
	p := serveInProcess(t, nil, xdsArgs(cp)...)
	should := func(r *pb.RateLimitRequest) *pb.RateLimitResponse {
		resp, err := p.rls.ShouldRateLimit(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	get := func(path string) (int, string) {
		resp, err := http.Get(p.http + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}

	cp.WaitRequest(t, xdsWait, xdstest.IsACK("v1"))
	admits(t, should, "a", 2)
	metricsHave(t, get, `sluice_config_info{source="xds",version="v1"} 1`)
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d with a configuration", code)
	}
	if h := cp.Headers()[0].Get("x-token"); len(h) != 1 || h[0] != "s3cret" {
		t.Errorf("the control plane got x-token %q", h)
	}

	cp.Set(t, "sluice-test", "v2", xdsDomain("r1", 5))
	cp.WaitRequest(t, xdsWait, xdstest.IsACK("v2"))
	admits(t, should, "b", 5)
	metricsHave(t, get, `sluice_config_info{source="xds",version="v2"} 1`, `sluice_config_reloads_total{result="success"} 2`)

	// The same domain in two resources, as in two files: NACKed.
	cp.Set(t, "sluice-test", "v3", xdsDomain("r1", 1), xdsDomain("r2", 1))
	nack := cp.WaitRequest(t, xdsWait, xdstest.IsNACK("v2"))
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, `xds resource "r2": domain: duplicate domain "xds" (already defined in xds resource "r1")`) {
		t.Errorf("NACK %q", msg)
	}
	admits(t, should, "c", 5) // v2 still decides
	metricsHave(t, get, `sluice_config_info{source="xds",version="v2"} 1`, `sluice_config_last_reload_successful 0`, `sluice_config_reloads_total{result="failure"} 1`)

	// A limit with no unit: NACKed with the field.
	bad := xdsDomain("r1", 1)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	cp.Set(t, "sluice-test", "v4", bad)
	nack = cp.WaitRequest(t, xdsWait, func(r *discovery.DiscoveryRequest) bool {
		return xdstest.IsNACK("v2")(r) && strings.Contains(r.GetErrorDetail().GetMessage(), "rate_limit")
	})
	t.Logf("NACK of a limit without unit: %s", nack.GetErrorDetail().GetMessage())
	admits(t, should, "d", 5)

	// The control plane goes away and returns with a new snapshot.
	cp.Stop()
	admits(t, should, "e", 5) // serving on
	cp.Set(t, "sluice-test", "v5", xdsDomain("r1", 1))
	cp.Restart(t)
	cp.WaitRequest(t, xdsWait, xdstest.IsACK("v5"))
	admits(t, should, "f", 1)
	metricsHave(t, get, `sluice_config_info{source="xds",version="v5"} 1`, `sluice_config_last_reload_successful 1`)
	log := p.stderr.String()
	for _, w := range []string{"configuration loaded from xds", "configuration rejected (NACK)", "control plane unavailable; retrying"} {
		if !strings.Contains(log, w) {
			t.Errorf("the log lacks %q", w)
		}
	}
}

// TestServeXDSForceStart: with --xds-force-start serve listens before a
// first configuration, not ready until it arrives.
func TestServeXDSForceStart(t *testing.T) {
	cp := xdstest.Start(t, nil)
	p := serveInProcess(t, nil, xdsArgs(cp, "--xds-force-start")...)
	get := func(path string) (int, string) {
		resp, err := http.Get(p.http + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "xDS") {
		t.Fatalf("/readyz before a configuration: %d %q", code, body)
	}
	// gRPC health agrees with /readyz.
	hc := healthpb.NewHealthClient(p.conn)
	serving := func() bool {
		t.Helper()
		r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status == healthpb.HealthCheckResponse_SERVING
	}
	if serving() {
		t.Fatal("gRPC health SERVING before a configuration, while /readyz is 503")
	}
	// No domain yet: answered as an unknown domain, OK with no limit.
	before, err := p.rls.ShouldRateLimit(t.Context(), &pb.RateLimitRequest{Domain: "xds", Descriptors: []*rlpb.RateLimitDescriptor{d("k", "a")}, HitsAddend: 1})
	if err != nil || before.GetOverallCode() != pb.RateLimitResponse_OK || before.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatalf("before a configuration: %v %v", before, err)
	}
	cp.Set(t, "sluice-test", "v1", xdsDomain("r1", 1))
	cp.WaitRequest(t, xdsWait, xdstest.IsACK("v1"))
	for deadline := time.Now().Add(xdsWait); ; time.Sleep(5 * time.Millisecond) {
		if code, _ := get("/readyz"); code == http.StatusOK && serving() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz or gRPC health not ready after the first configuration")
		}
	}
	resp, err := p.rls.ShouldRateLimit(t.Context(), &pb.RateLimitRequest{Domain: "xds", Descriptors: []*rlpb.RateLimitDescriptor{d("k", "a")}, HitsAddend: 1})
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
		t.Fatalf("after the first configuration: %v %v", resp, err)
	}
}

func TestXDSFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--xds-server", "h:1", "--config", "x.yaml"}, "--xds-server and --config are alternatives"},
		{[]string{"--xds-tls"}, "--xds-* need --xds-server"},
		{[]string{"--xds-server", "h:1", "--xds-tls-ca", "ca.pem"}, "--xds-tls-* need --xds-tls"},
		{[]string{"--xds-server", "h:1", "--xds-tls", "--xds-tls-cert", "c.pem"}, "--xds-tls-cert and --xds-tls-key go together"},
		{[]string{"--xds-server", "h:1", "--xds-node-metadata", "zone"}, `--xds-node-metadata: entry "zone"`},
		{[]string{"--xds-server", "h:1", "--xds-headers", "=v"}, `--xds-headers: entry "=v"`},
		{[]string{"--xds-server", "h:1", "--xds-backoff-initial", "0s"}, "--xds-backoff-initial must be > 0"},
		{[]string{"--xds-server", "h:1", "--xds-backoff-initial", "2s", "--xds-backoff-max", "1s"}, "--xds-backoff-max >= it"},
		{[]string{"--xds-server", "h:1", "--xds-backoff-random-factor", "1.5"}, "--xds-backoff-random-factor must be within [0, 1]"},
		{[]string{"--xds-server", "h:1", "--xds-max-message-size", "2GiB"}, "--xds-max-message-size must be within"},
	} {
		var f serveFlags
		var out bytes.Buffer
		fs := serveFlagSet(&f, &out)
		if code, done := parse(fs, tc.args); done {
			t.Fatalf("%q: exit %d: %s", tc.args, code, &out)
		}
		err := f.validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	m, err := splitPairs("f", "a=1, b:2=x ,c=d:e,")
	if err != nil || len(m) != 3 || m["a"] != "1" || m["b"] != "2=x" || m["c"] != "d:e" {
		t.Errorf("splitPairs: %v %v", m, err)
	}
}

// TestE2EXDS runs the built binary on an xDS control plane.
func TestE2EXDS(t *testing.T) {
	cp := xdstest.Start(t, nil)
	cp.Set(t, "sluice-test", "v1", xdsDomain("r1", 2))
	p := start(t, nil, xdsArgs(cp)...)
	should := func(r *pb.RateLimitRequest) *pb.RateLimitResponse {
		return p.should(t, r.Domain, r.HitsAddend, r.Descriptors...)
	}
	admits(t, should, "a", 2)
	cp.Set(t, "sluice-test", "v2", xdsDomain("r1", 3))
	cp.WaitRequest(t, xdsWait, xdstest.IsACK("v2"))
	admits(t, should, "b", 3)
	cp.Set(t, "sluice-test", "v3", xdsDomain("r1", 1), xdsDomain("r2", 1))
	cp.WaitRequest(t, xdsWait, xdstest.IsNACK("v2"))
	admits(t, should, "c", 3)
	p.waitLog(t, "configuration rejected (NACK)")
	metricsHave(t, func(path string) (int, string) { return p.get(t, path) }, `sluice_config_info{source="xds",version="v2"} 1`)
}

// TestServeXDSmTLS: --xds-tls-* reach the control plane over mTLS.
func TestServeXDSmTLS(t *testing.T) {
	ca := certstest.NewCA(t, "control plane CA")
	clientCA := certstest.NewCA(t, "client CA")
	dir := t.TempDir()
	caFile := ca.Write(t, dir, "ca")
	certFile, keyFile := clientCA.Client(t, "sluice").Write(t, dir, "client")
	cp := xdstest.Start(t, &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "xds.test", "xds.test").TLS},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA.Pool(), MinVersion: tls.VersionTLS12})
	cp.Set(t, "sluice-test", "v1", xdsDomain("r1", 2))
	p := serveInProcess(t, nil, xdsArgs(cp, "--xds-tls", "--xds-tls-ca", caFile, "--xds-tls-cert", certFile,
		"--xds-tls-key", keyFile, "--xds-tls-server-name", "xds.test")...)
	cp.WaitRequest(t, xdsWait, xdstest.IsACK("v1"))
	admits(t, func(r *pb.RateLimitRequest) *pb.RateLimitResponse {
		resp, err := p.rls.ShouldRateLimit(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}, "a", 2)
}

// TestConfigInfoFiles: sluice_config_info tells the files' version, which
// a reload changes.
func TestConfigInfoFiles(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "a.yaml")
	writeFile(t, cfg, "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	p := serveInProcess(t, nil, "--config", cfg, "--reload-interval", "10ms")
	get := func(path string) (int, string) {
		resp, err := http.Get(p.http + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	version := func() string {
		_, body := get("/metrics")
		m := regexp.MustCompile(`sluice_config_info\{source="file",version="([0-9a-f]{12})"\} 1`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no sluice_config_info of files in:\n%s", grepLines(body, "sluice_config"))
		}
		return m[1]
	}
	v1 := version()
	writeFile(t, cfg, "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	for deadline := time.Now().Add(xdsWait); version() == v1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the version did not change with the files")
		}
	}
	if _, body := get("/metrics"); !strings.Contains(body, "sluice_config_last_load_timestamp_seconds") {
		t.Error("no sluice_config_last_load_timestamp_seconds")
	}
}

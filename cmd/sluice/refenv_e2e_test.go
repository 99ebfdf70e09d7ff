package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/window"
	"github.com/sluicehq/sluice/service/certs/certstest"
	"github.com/sluicehq/sluice/service/xds/xdstest"
)

// envList turns m into KEY=VALUE entries for exec.
func envList(m map[string]string) []string {
	var env []string
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	return env
}

const refEnvConfig = `domain: eg
descriptors:
  - key: generic_key
    value: default
    rate_limit:
      unit: minute
      requests_per_unit: 3
`

// egTLS is the certificate Envoy Gateway mounts at /certs: the same files
// serve gRPC and authenticate to the control plane.
type egTLS struct {
	ca                        *certstest.CA
	leaf                      *certstest.Leaf
	certFile, keyFile, caFile string
}

func newEGTLS(t *testing.T) *egTLS {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "envoy gateway CA")
	g := &egTLS{ca: ca, leaf: ca.Server(t, "envoy-ratelimit", "127.0.0.1")}
	g.certFile, g.keyFile = g.leaf.Write(t, dir, "tls")
	g.caFile = ca.Write(t, dir, "ca")
	return g
}

// egEnv is Envoy Gateway's environment (deployments/default.yaml) with
// this test's files, Redis and addresses, and then set.
func egEnv(g *egTLS, redisAddr string, set map[string]string) []string {
	env := maps.Clone(envoyGatewayDefaultEnv)
	for _, k := range []string{"GRPC_SERVER_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"} {
		env[k] = g.certFile
	}
	for _, k := range []string{"GRPC_SERVER_TLS_KEY", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"} {
		env[k] = g.keyFile
	}
	for _, k := range []string{"GRPC_SERVER_TLS_CA_CERT", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"} {
		env[k] = g.caFile
	}
	env["REDIS_URL"] = redisAddr
	env["PROMETHEUS_ADDR"] = "127.0.0.1:0"
	maps.Copy(env, set)
	return envList(env)
}

// rlsOverTLS returns a ShouldRateLimit of domain eg over TLS to addr, as
// Envoy asks with GRPC_SERVER_USE_TLS: no client certificate (the reference
// does not read GRPC_SERVER_TLS_CA_CERT, so it asks for none).
func rlsOverTLS(t *testing.T, addr string, g *egTLS) func(hits uint32, kv ...string) pb.RateLimitResponse_Code {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: g.ca.Pool(), ServerName: "127.0.0.1"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rls := pb.NewRateLimitServiceClient(conn)
	return func(hits uint32, kv ...string) pb.RateLimitResponse_Code {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "eg", Descriptors: rlsDescriptors(kv...), HitsAddend: hits})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%v): %v", kv, err)
		}
		return resp.OverallCode
	}
}

// TestE2EReferenceEnvFile starts the built binary with Envoy Gateway's
// environment for a file configuration (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY,
// Redis over TCP, gRPC over TLS, Prometheus on its own port, JSON logs),
// and answers Envoy's requests over gRPC with the counters in Redis.
func TestE2EReferenceEnvFile(t *testing.T) {
	rd := redistest.Server(t)
	root := t.TempDir()
	conf := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(filepath.Join(conf, "..2026_01_01"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(conf, "eg.yaml"), refEnvConfig)
	// A Kubernetes ConfigMap's hidden copy: RUNTIME_IGNOREDOTFILES skips it
	// (read, its domain would be defined twice).
	writeFile(t, filepath.Join(conf, "..2026_01_01", "eg.yaml"), refEnvConfig)

	g := newEGTLS(t)
	// Envoy Gateway's environment, with the configuration from files.
	env := egEnv(g, rd.Addr, map[string]string{"CONFIG_TYPE": "FILE", "RUNTIME_ROOT": root, "LOG_FORMAT": "json"})
	// start's --http, --grpc and --log-level debug are flags: they win over
	// PORT, GRPC_PORT and LOG_LEVEL.
	p := start(t, env)
	p.waitLog(t, `"msg":"sluice listening"`) // after the lines checked here, copied from a pipe
	log := p.stderr.String()
	for _, want := range []string{`"level":"WARN","msg":"configured by envoyproxy/ratelimit's environment variables`,
		"--config=" + conf, "--redis=redis://" + rd.Addr, "--tls-grpc-only=true", `"var":"PROMETHEUS_MAPPER_YAML"`, `"var":"GRPC_SERVER_TLS_CA_CERT"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if !strings.Contains(log, `"store":"redis (failover fail_closed)"`) {
		t.Errorf("store is not Redis:\n%s", log)
	}

	rls := rlsOverTLS(t, p.grpc, g)
	should := func(hits uint32) pb.RateLimitResponse_Code { t.Helper(); return rls(hits, "generic_key", "default") }
	// 3 a minute: 2 hits, then 2 more (over), then 1. The reference counts
	// the denied 2 (4, then 5: over).
	if got := should(2); got != pb.RateLimitResponse_OK {
		t.Fatalf("2 hits: %v, want OK", got)
	}
	if got := should(2); got != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("2 more hits: %v, want OVER_LIMIT", got)
	}
	if got := should(1); got != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("1 more hit after a denied 2: %v, want OVER_LIMIT (the reference counts denied hits)", got)
	}
	if !strings.Contains(log, "--counting=all") {
		t.Errorf("log lacks the reference's counting, --counting=all")
	}
	// The counters are in Redis.
	keys, err := rd.Do("KEYS", "sluice:*")
	if err != nil || keys == "" {
		t.Errorf("Redis keys %q, %v; want sluice's counters", keys, err)
	}

	// HTTP stays plain (Envoy Gateway's probes: GET /healthcheck on 8080),
	// and Prometheus's port serves /metrics.
	if code, body := p.get(t, "/healthcheck"); code != 200 {
		t.Errorf("GET /healthcheck = %d %q", code, body)
	}
	p.waitLog(t, `"msg":"admin listener"`)
	m := regexp.MustCompile(`"msg":"admin listener","addr":"([^"]+)"`).FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no admin listener in the log")
	}
	admin := m[1]
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "sluice_") {
		t.Errorf("GET /metrics on PROMETHEUS_ADDR = %d, %d bytes", resp.StatusCode, len(b))
	}
}

// TestE2EReferenceEnvUnixSocket: the reference's default Redis is a Unix
// socket (REDIS_SOCKET_TYPE unix); REDIS_AUTH is its password.
func TestE2EReferenceEnvUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	rd := redistest.Server(t, redistest.WithPassword("s3cret"), redistest.WithArgs("--unixsocket", sock, "--unixsocketperm", "700"))
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "config", "eg.yaml"), refEnvConfig)
	p := start(t, envList(map[string]string{"RUNTIME_ROOT": root, "REDIS_URL": sock, "REDIS_AUTH": "s3cret",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "USE_STATSD": "true"}))
	for i := range 4 {
		want := pb.RateLimitResponse_OK
		if i == 3 {
			want = pb.RateLimitResponse_OVER_LIMIT
		}
		if got := p.should(t, "eg", 1, d("generic_key", "default")).OverallCode; got != want {
			t.Errorf("hit %d: %v, want %v", i+1, got, want)
		}
	}
	if keys, err := rd.Do("KEYS", "sluice:*"); err != nil || keys == "" {
		t.Errorf("Redis keys %q, %v; want sluice's counters", keys, err)
	}
	p.waitLog(t, "msg=\"sluice listening\"")
	log := p.stderr.String()
	for _, want := range []string{"--redis=unix://:xxxxx@" + sock, "var=USE_STATSD", "--debug-addr=127.0.0.1:0"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if strings.Contains(log, "s3cret") {
		t.Error("the log shows REDIS_AUTH's password")
	}
}

// TestE2EReferenceEnvRefused: a setting sluice cannot honour stops it at
// start, naming the variable.
func TestE2EReferenceEnvRefused(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=127.0.0.1:11211"}, "BACKEND_TYPE: memcache: sluice has no memcached store"},
		{[]string{"CONFIG_TYPE=FILE", "PORT=abc"}, `PORT: "abc": want a port number`},
		{[]string{"USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis://127.0.0.1:6379"}, `REDIS_URL: "redis://127.0.0.1:6379": want envoyproxy/ratelimit's form`},
	} {
		out, code := runSluice(t, tt.env, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
		if code != 2 || !strings.Contains(out, tt.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tt.env, code, out, tt.want)
		}
	}
}

// runSluice runs the built binary with env added to the environment and
// returns its stderr and exit code; it must exit within 20s.
func runSluice(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out syncBuffer
	cmd.Stderr = &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("sluice %v: %v", args, err)
	}
	return out.String(), 0
}

// egLimits is domain eg's configuration as Envoy Gateway pushes it: the
// limit of generic_key=value, and probe, always over its limit (a zero
// rate), which tells that the configuration is in force.
func egLimits(version, value string, perMinute uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "eg-" + version, Domain: "eg", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "generic_key", Value: value, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: perMinute}},
		{Key: "probe", Value: version, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 0}},
	}}
}

// TestE2EReferenceEnvXDS starts the built binary with Envoy Gateway's
// environment exactly as its rate-limit Deployment sets it (testdata
// deployments/default.yaml: CONFIG_TYPE=GRPC_XDS_SOTW, mTLS to the control
// plane, TLS gRPC, Redis over TCP), an xDS server pushing RateLimitConfig
// resources, and Redis; it answers Envoy's requests by the pushed limits and
// takes an update.
func TestE2EReferenceEnvXDS(t *testing.T) {
	rd := redistest.Server(t)
	g := newEGTLS(t)
	cp := xdstest.Start(t, &tls.Config{Certificates: []tls.Certificate{g.leaf.TLS}, ClientCAs: g.ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert})
	const node = "envoy-ratelimit" // Envoy Gateway's CONFIG_GRPC_XDS_NODE_ID
	cp.Set(t, node, "v1", egLimits("v1", "default", 3))
	p := start(t, egEnv(g, rd.Addr, map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": cp.Addr}))
	should := rlsOverTLS(t, p.grpc, g)
	// inForce waits until version's configuration decides.
	inForce := func(version string) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); should(0, "probe", version) != pb.RateLimitResponse_OVER_LIMIT; {
			if time.Now().After(deadline) {
				t.Fatalf("xDS configuration %s not in force after 15s", version)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The counts hold within one minute window: a sequence that a
	// boundary interrupts runs again, on the configurations of another
	// value.
	window.Run(t, time.Minute, 40*time.Second, func(f *window.Findings, attempt int) {
		v1, v2, value := "v1", "v2", "default"
		if attempt > 0 {
			v1, v2, value = fmt.Sprintf("v1.%d", attempt), fmt.Sprintf("v2.%d", attempt), fmt.Sprintf("default-%d", attempt)
			cp.Set(t, node, v1, egLimits(v1, value, 3))
		}
		inForce(v1)
		for i := range 4 {
			want := pb.RateLimitResponse_OK
			if i == 3 {
				want = pb.RateLimitResponse_OVER_LIMIT
			}
			if got := should(1, "generic_key", value); got != want {
				f.Errorf("%s hit %d: %v, want %v", v1, i+1, got, want)
			}
		}
		if keys, err := rd.Do("KEYS", "sluice:*"); err != nil || keys == "" {
			f.Errorf("Redis keys %q, %v; want sluice's counters", keys, err)
		}

		// An update replaces the configuration: 10 a minute now, the
		// same counter (4 hits so far: the denied one is counted).
		cp.Set(t, node, v2, egLimits(v2, value, 10))
		inForce(v2)
		for i := 4; i < 11; i++ {
			want := pb.RateLimitResponse_OK
			if i == 10 {
				want = pb.RateLimitResponse_OVER_LIMIT
			}
			if got := should(1, "generic_key", value); got != want {
				f.Errorf("%s hit %d: %v, want %v", v2, i+1, got, want)
			}
		}
	})
}

// TestE2ERatelimitName: installed as /bin/ratelimit (the command Envoy
// Gateway's Deployment runs), the binary is sluice serve.
func TestE2ERatelimitName(t *testing.T) {
	name := filepath.Join(t.TempDir(), "ratelimit")
	b, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Usage: sluice serve [flags]") || !strings.Contains(string(out), "-reference-env") {
		t.Errorf("ratelimit -h: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, name, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--reference-env", "on", "--redis", "redis://127.0.0.1:1", "--redis-required").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "/srv/runtime_data/current/config") {
		t.Errorf("ratelimit with the reference's defaults: %v, want the configuration error of RUNTIME_ROOT's default\n%s", err, out)
	}
}

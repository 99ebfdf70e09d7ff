package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/window"
	"github.com/sluicehq/sluice/service/certs/certstest"
)

// waitReady polls /readyz until it answers want.
func (p *proc) waitReady(t *testing.T, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, body := p.get(t, "/readyz")
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q after %v, want %d", code, body, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Redis that is down when sluice starts: sluice serves by its failure
// policy with the breaker open and /readyz failing, and uses Redis as soon
// as it comes up.
func TestE2ERedisDownAtStart(t *testing.T) {
	port := redistest.FreePort(t)
	cfg := filepath.Join(t.TempDir(), "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	p := start(t, nil, "--config", cfg, "--redis", "redis://127.0.0.1:"+strconv.Itoa(port), "--readyz-breaker", "--redis-timeout", "1s")
	p.waitLog(t, "redis unreachable at start")
	p.waitReady(t, 503, time.Second)
	// No request here depends on a window of the clock: key1=down is
	// denied by the failure policy (counted nowhere) and key1=up is a new
	// key's first hit in a new Redis (19 remaining in any window).
	if resp := p.should(t, "e2e", 1, d("key1", "down")); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("fail closed before Redis is up: %v, want OVER_LIMIT", resp)
	}
	if _, m := p.get(t, "/metrics"); !strings.Contains(m, "sluice_breaker_open 1") {
		t.Errorf("metrics before Redis is up:\n%s", grepLines(m, "breaker"))
	}

	r := redistest.ServerOnPort(t, port)
	p.waitReady(t, 200, 10*time.Second)
	p.waitLog(t, "redis connected")
	resp := p.should(t, "e2e", 1, d("key1", "up"))
	if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 19 {
		t.Errorf("once Redis is up: %v, want OK with 19 remaining", resp)
	}
	if n, err := strconv.Atoi(r.MustDo("DBSIZE")); err != nil || n == 0 {
		t.Errorf("Redis DBSIZE = %v, %v: want the decision's key in Redis", n, err)
	}
}

// The same with --failure-mode open: the local share admits from the start.
func TestE2ERedisDownAtStartFailOpen(t *testing.T) {
	port := redistest.FreePort(t)
	cfg := filepath.Join(t.TempDir(), "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	p := start(t, nil, "--config", cfg, "--redis", "redis://127.0.0.1:"+strconv.Itoa(port), "--failure-mode", "open", "--replicas", "4")
	// key1 admits 20 a minute: 5 for each of 4 replicas while Redis is
	// down, counted in one window of a minute on the attempt's own key;
	// 10 s is far beyond what the sequence takes.
	window.Run(t, time.Minute, 10*time.Second, func(f *window.Findings, attempt int) {
		key := fmt.Sprintf("open%d", attempt)
		for i := range 6 {
			resp := p.should(t, "e2e", 1, d("key1", key))
			if want := i < 5; (resp.OverallCode == pb.RateLimitResponse_OK) != want {
				f.Errorf("call %d with Redis down, fail open at 20/4: %v, want admitted=%v", i+1, resp.OverallCode, want)
			}
		}
	})
}

func TestE2ERedisRequired(t *testing.T) {
	port := redistest.FreePort(t)
	out, err := exec.Command(binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
		"--redis", "redis://127.0.0.1:"+strconv.Itoa(port), "--redis-required").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "--redis:") {
		t.Errorf("--redis-required with Redis down: exit %d, output %q; want 1 naming --redis", code, out)
	}
	// A mistake of configuration is fatal without --redis-required too.
	out, err = exec.Command(binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
		"--redis", "redis+sentinel://127.0.0.1:"+strconv.Itoa(port)).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "master") {
		t.Errorf("an invalid --redis URL: exit %d, output %q; want 1", code, out)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

const failOpenConfig = `domain: fo
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 5, failure_mode: open}
`

func TestE2EFailureModeOpenNeedsReplicas(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "fo.yaml")
	writeFile(t, cfg, failOpenConfig)
	port := strconv.Itoa(redistest.FreePort(t))
	out, err := exec.Command(binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
		"--config", cfg, "--redis", "redis://127.0.0.1:"+port).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "rule fo.tenant: failure_mode: open needs --replicas") {
		t.Errorf("failure_mode: open without --replicas: exit %d, output %q; want 1 naming rule fo.tenant", code, out)
	}
	// With --replicas it starts; without --redis there is no outage to fail open in.
	start(t, nil, "--config", cfg, "--redis", "redis://127.0.0.1:"+port, "--replicas", "3")
	start(t, nil, "--config", cfg)

	// A reload to such a rule is refused; the running configuration stays.
	dir := t.TempDir()
	cfg2 := filepath.Join(dir, "c.yaml")
	writeFile(t, cfg2, e2eConfig)
	p := start(t, nil, "--config", cfg2, "--redis", "redis://127.0.0.1:"+port, "--reload-interval", "20ms")
	writeFile(t, cfg2, failOpenConfig)
	p.waitLog(t, "rule fo.tenant: failure_mode: open needs --replicas")
	if !strings.Contains(p.stderr.String(), "keeping the running configuration") {
		t.Errorf("the reload error does not say the configuration was kept:\n%s", p.stderr)
	}
	if _, m := p.get(t, "/metrics"); !strings.Contains(m, "sluice_config_last_reload_successful 0") {
		t.Errorf("metrics after the refused reload:\n%s", grepLines(m, "reload"))
	}
}

// rediss:// with a client certificate against a real TLS redis-server that
// requires one, set by flags and by URL parameters.
func TestE2ERedisTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "redis CA")
	srvCert, srvKey := ca.Server(t, "redis.internal", "redis.internal").Write(t, dir, "redis")
	caFile := ca.Write(t, dir, "ca")
	cliCert, cliKey := ca.Client(t, "sluice").Write(t, dir, "client")
	r, tlsAddr := redistest.TLSServer(t, redistest.TLSFiles{Cert: srvCert, Key: srvKey, CA: caFile, AuthClients: true})
	url := "rediss://" + tlsAddr
	cfg := filepath.Join(dir, "e2e.yaml")
	writeFile(t, cfg, e2eConfig)

	for _, tt := range []struct {
		name string
		args []string
	}{
		{"flags", []string{"--redis", url, "--redis-tls-ca", caFile, "--redis-tls-cert", cliCert, "--redis-tls-key", cliKey, "--redis-tls-server-name", "redis.internal"}},
		{"url", []string{"--redis", fmt.Sprintf("%s?tls_ca=%s&tls_cert=%s&tls_key=%s&tls_server_name=redis.internal", url, caFile, cliCert, cliKey)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--config", cfg, "--redis-required", "--redis-timeout", "5s"}, tt.args...)
			p := start(t, nil, args...)
			key := "tls-" + tt.name
			if resp := p.should(t, "e2e", 1, d("key1", key)); resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 19 {
				t.Fatalf("decision over TLS: %v", resp)
			}
			if keys := r.MustDo("KEYS", "*"+key+"*"); keys == "" {
				t.Errorf("no key of the decision in Redis")
			}
		})
	}
	// Without the client certificate, the TLS Redis refuses sluice.
	out, err := exec.Command(binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--redis-required",
		"--redis", url, "--redis-tls-ca", caFile, "--redis-tls-server-name", "redis.internal").CombinedOutput()
	if code := exitCode(err); code != 1 {
		t.Errorf("no client certificate: exit %d, output %q; want 1", code, out)
	}
	// Nor does sluice trust a Redis whose certificate is not for the name.
	out, err = exec.Command(binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--redis-required",
		"--redis", url, "--redis-tls-ca", caFile, "--redis-tls-cert", cliCert, "--redis-tls-key", cliKey).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "certificate") {
		t.Errorf("server name 127.0.0.1 against a certificate for redis.internal: exit %d, output %q; want 1", code, out)
	}
}

// TestE2ERedisTLSSkipHostname: under the reference's environment,
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true accepts a Redis whose
// certificate, from the trusted CA, names another host than the one
// dialed; it still refuses a certificate from another CA, and without
// it the name is checked.
func TestE2ERedisTLSSkipHostname(t *testing.T) {
	dir := t.TempDir()
	ca, other := certstest.NewCA(t, "redis CA"), certstest.NewCA(t, "another CA")
	caFile := ca.Write(t, dir, "ca")
	srvCert, srvKey := ca.Server(t, "redis.internal", "redis.internal").Write(t, dir, "redis")
	otherCert, otherKey := other.Server(t, "redis.internal", "redis.internal", "127.0.0.1").Write(t, dir, "other")
	r, tlsAddr := redistest.TLSServer(t, redistest.TLSFiles{Cert: srvCert, Key: srvKey, CA: caFile})
	_, otherAddr := redistest.TLSServer(t, redistest.TLSFiles{Cert: otherCert, Key: otherKey, CA: caFile})
	cfg := filepath.Join(dir, "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	refEnv := func(addr, skip string) []string {
		return []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + addr, "REDIS_TLS=true", "REDIS_TLS_CACERT=" + caFile,
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=" + skip, "USE_STATSD=false", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0"}
	}

	p := start(t, refEnv(tlsAddr, "true"), "--config", cfg, "--redis-required")
	if resp := p.should(t, "e2e", 1, d("key1", "skip-name")); resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("decision over TLS without the name check: %v", resp)
	}
	if keys := r.MustDo("KEYS", "*skip-name*"); keys == "" {
		t.Errorf("no key of the decision in Redis")
	}
	for _, tc := range []struct{ name, addr, skip string }{
		{"name checked", tlsAddr, "false"},
		{"another CA", otherAddr, "true"},
	} {
		cmd := exec.Command(binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--redis-required", "--config", cfg)
		cmd.Env = append(append(os.Environ(), "SLUICE_REDIS_TIMEOUT=5s"), refEnv(tc.addr, tc.skip)...)
		out, err := cmd.CombinedOutput()
		if code := exitCode(err); code != 1 || !strings.Contains(string(out), "certificate") {
			t.Errorf("%s: exit %d, output %q; want 1 and a certificate error", tc.name, code, out)
		}
	}
}

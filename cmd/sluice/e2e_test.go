package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/servetest"
	"github.com/sluicehq/sluice/internal/testserver/window"
)

// binary is the sluice command built once for the end-to-end tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer collects a process's output.
type syncBuffer = servetest.Output

// proc is a running sluice serve.
type proc struct {
	cmd        *exec.Cmd
	stderr     *syncBuffer
	http, grpc string
	storeAPI   string // host:port of the store API, with --store-api-addr
	rls        pb.RateLimitServiceClient
	conn       *grpc.ClientConn
	done       chan struct{}
	exitErr    error
}

// start runs sluice serve on loopback ports with args and waits until it
// listens (its --ready-file appears).
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready.json")
	args = append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--ready-file", ready, "--log-level", "debug"}, args...)
	p := &proc{cmd: exec.Command(binary, args...), stderr: &syncBuffer{}, done: make(chan struct{})}
	// A busy machine's Redis answers late, not never: the default
	// deadline of a store call (50 ms) would turn its slow calls into
	// failover decisions. A test's own --redis-timeout (or env) wins.
	p.cmd.Env = append(append(os.Environ(), "SLUICE_REDIS_TIMEOUT=5s"), env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exitErr = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("sluice stderr:\n%s", p.stderr)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(ready)
		if err == nil {
			var addrs struct {
				HTTP, GRPC string
				StoreAPI   string `json:"store_api"`
			}
			if err := json.Unmarshal(b, &addrs); err != nil {
				t.Fatalf("ready file %s: %v", b, err)
			}
			p.http, p.grpc, p.storeAPI = "http://"+addrs.HTTP, addrs.GRPC, addrs.StoreAPI
			break
		}
		select {
		case <-p.done:
			t.Fatalf("sluice exited before listening: %v\n%s", p.exitErr, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice did not listen within 20s:\n%s", p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	target := p.grpc
	if strings.HasPrefix(target, "/") { // --grpc-uds
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.conn, p.rls = conn, pb.NewRateLimitServiceClient(conn)
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("sluice still running after %v", within)
	}
	var ee *exec.ExitError
	if errors.As(p.exitErr, &ee) {
		return ee.ExitCode()
	}
	if p.exitErr != nil {
		t.Fatal(p.exitErr)
	}
	return 0
}

// waitLog waits until the process's stderr contains s: it is copied from a
// pipe, so a line may arrive after the event it reports.
func (p *proc) waitLog(t *testing.T, s string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.stderr.String(), s); {
		if time.Now().After(deadline) {
			t.Fatalf("stderr lacks %q after 10s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *proc) should(t *testing.T, domain string, hits uint32, ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %v): %v", domain, ds, err)
	}
	return resp
}

func (p *proc) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(p.http + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (p *proc) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(p.http+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func d(kv ...string) *rlpb.RateLimitDescriptor {
	out := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// writeFile replaces path's content at once (a hidden temporary file
// renamed over it), so that a reloading server never reads it half written.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// The reference's integration expectations, over gRPC.
const e2eConfig = `domain: e2e
descriptors:
  - key: key1
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: unl
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wild
    value: "abc*"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: generic
    rate_limit: {unit: hour, requests_per_unit: 100, name: generic}
  - key: specific
    rate_limit: {unit: hour, requests_per_unit: 1, name: specific, replaces: [{name: generic}]}
  - key: slide
    rate_limit: {algorithm: sliding_log, window: 30s, requests_per_unit: 3}
  - key: two
    rate_limits:
      - {algorithm: sliding_window, window: 30s, requests_per_unit: 4}
      - {algorithm: gcra, unit: hour, requests_per_unit: 2}
`

func TestE2EReferenceBehaviour(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	eachGRPCTransport(t, func(t *testing.T, transport ...string) {
		testReferenceBehaviour(t, start(t, nil, append(transport, "--config", cfg)...))
	})
}

// refStep is a named step of a sequence run by window.Run: its findings carry
// the step's name, as a subtest's would.
type refStep struct {
	f    *window.Findings
	name string
}

func (s refStep) Helper() {}

func (s refStep) Errorf(format string, args ...any) {
	s.f.Errorf("%s: %s", s.name, fmt.Sprintf(format, args...))
}

func (s refStep) Logf(format string, args ...any) {
	s.f.Logf("%s: %s", s.name, fmt.Sprintf(format, args...))
}

// seriesValue returns the value of series (a metric's name and labels, as
// /metrics writes them) in the exposition text m, and whether m has it.
func seriesValue(t testing.TB, m, series string) (float64, bool) {
	t.Helper()
	for l := range strings.Lines(m) {
		if v, ok := strings.CutPrefix(strings.TrimSuffix(l, "\n"), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %s: %v", l, err)
			}
			return f, true
		}
	}
	return 0, false
}

func testReferenceBehaviour(t *testing.T, p *proc) {
	// The steps whose counts hold within one window of a minute (the
	// hour's of "replaces" and of "two limits" with it) run as one
	// sequence: one that a boundary interrupts runs again, on the
	// attempt's own values. 20 s is far beyond what the sequence takes.
	window.Run(t, time.Minute, 20*time.Second, func(f *window.Findings, attempt int) {
		inStep := func(name string, fn func(s refStep)) { fn(refStep{f, name}) }
		v := fmt.Sprintf("v%d", attempt)
		inStep("20 per minute", func(s refStep) {
			lastReset := time.Hour
			for i := range 20 {
				resp := p.should(t, "e2e", 0, d("key1", v))
				st := resp.Statuses[0]
				if resp.OverallCode != pb.RateLimitResponse_OK || st.LimitRemaining != uint32(19-i) ||
					st.CurrentLimit.GetRequestsPerUnit() != 20 || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE {
					s.Errorf("call %d: %v, want OK with 20/MINUTE remaining %d", i+1, resp, 19-i)
					return
				}
				reset := st.DurationUntilReset.AsDuration()
				if reset <= 0 || reset > time.Minute || reset > lastReset {
					s.Errorf("call %d: duration_until_reset %v after %v, want falling within (0, 1m]", i+1, reset, lastReset)
					return
				}
				lastReset = reset
			}
			resp := p.should(t, "e2e", 0, d("key1", v))
			if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 0 {
				s.Errorf("21st call: %v, want OVER_LIMIT", resp)
			}
		})
		inStep("shadow mode", func(s refStep) {
			// The process's counters are cumulative (an earlier
			// attempt's hits are in them): the step adds 2.
			const (
				decisions = `sluice_rls_decisions_total{domain="e2e",result="shadow_over_limit",rule="e2e.shadow"}`
				hits      = `sluice_rls_shadow_mode_hits_total{domain="e2e",rule="e2e.shadow"}`
			)
			_, before := p.get(t, "/metrics")
			for i := range 3 {
				if resp := p.should(t, "e2e", 0, d("shadow", fmt.Sprintf("x%d", attempt))); resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].Code != pb.RateLimitResponse_OK {
					s.Errorf("shadow call %d: %v, want OK", i+1, resp)
				}
			}
			_, after := p.get(t, "/metrics")
			for _, series := range []string{decisions, hits} {
				a, _ := seriesValue(t, after, series)
				b, _ := seriesValue(t, before, series)
				if n := a - b; n != 2 {
					s.Errorf("%s grew by %v, want 2 shadow-mode hits:\n%s", series, n, grepLines(after, "shadow"))
				}
			}
		})
		inStep("wildcard", func(s refStep) {
			for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
				if resp := p.should(t, "e2e", 0, d("wild", fmt.Sprintf("abcdef%d", attempt))); resp.OverallCode != want {
					s.Errorf("wild=abcdef%d call %d: %v, want %v", attempt, i+1, resp.OverallCode, want)
				}
			}
			if resp := p.should(t, "e2e", 0, d("wild", fmt.Sprintf("abcxyz%d", attempt))); resp.OverallCode != pb.RateLimitResponse_OK {
				s.Errorf("wild=abcxyz%d: %v, want OK (own counter per value)", attempt, resp.OverallCode)
			}
			if resp := p.should(t, "e2e", 0, d("wild", "xyz")); resp.Statuses[0].CurrentLimit != nil {
				s.Errorf("wild=xyz: %v, want no limit", resp)
			}
		})
		inStep("replaces", func(s refStep) {
			g, sp := fmt.Sprintf("g%d", attempt), fmt.Sprintf("s%d", attempt)
			resp := p.should(t, "e2e", 0, d("generic", g), d("specific", sp))
			if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil || resp.Statuses[1].CurrentLimit.GetName() != "specific" {
				s.Errorf("got %v, want generic replaced by specific", resp)
			}
			if resp := p.should(t, "e2e", 0, d("generic", g), d("specific", sp)); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				s.Errorf("second call: %v, want OVER_LIMIT by specific (1 per hour)", resp.OverallCode)
			}
		})
		inStep("hits_addend", func(s refStep) {
			h := fmt.Sprintf("h%d", attempt)
			resp := p.should(t, "e2e", 15, d("key1", h))
			if resp.Statuses[0].LimitRemaining != 5 {
				s.Errorf("hits_addend 15: %v, want 5 remaining", resp)
			}
			desc := d("key1", h)
			desc.HitsAddend = wrapperspb.UInt64(5)
			resp = p.should(t, "e2e", 1, desc)
			if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 {
				s.Errorf("descriptor hits_addend 5: %v, want OK with 0 remaining", resp)
			}
		})
		inStep("two limits on one node, all or nothing", func(s refStep) {
			// two's 2 per hour (GCRA) holds for an hour: each attempt
			// has its own value.
			two, aon := fmt.Sprintf("x%d", attempt), fmt.Sprintf("aon%d", attempt)
			for i := range 2 {
				if resp := p.should(t, "e2e", 0, d("two", two)); resp.OverallCode != pb.RateLimitResponse_OK {
					s.Errorf("call %d: %v, want OK", i+1, resp)
					return
				}
			}
			resp := p.should(t, "e2e", 0, d("two", two), d("key1", aon))
			if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_HOUR {
				s.Errorf("3rd call: %v, want OVER_LIMIT by the 2 per hour limit", resp)
			}
			// key1=aon was not counted by the denied call (in this
			// minute's window, which a count of it would still be in).
			if resp := p.should(t, "e2e", 0, d("key1", aon)); resp.Statuses[0].LimitRemaining != 19 {
				s.Errorf("key1=%s after the denied call: %v, want 19 remaining", aon, resp)
			}
		})
		inStep("http json", func(s refStep) {
			// key1=v is used up by "20 per minute", in this window.
			code, body := p.post(t, "/json", fmt.Sprintf(`{"domain":"e2e","descriptors":[{"entries":[{"key":"key1","value":%q}]}]}`, v))
			if code != 429 || !strings.Contains(body, `"OVER_LIMIT"`) {
				s.Errorf("POST /json on a used-up key = %d %s, want 429", code, body)
			}
		})
	})
	// The steps below depend on no window of the clock (a sliding log
	// counts from its own requests).
	t.Run("unmatched and unlimited", func(t *testing.T) {
		resp := p.should(t, "e2e", 0, d("nothing", "x"), d("unl", "x"))
		if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil ||
			resp.Statuses[1].LimitRemaining != math.MaxUint32 || resp.Statuses[1].CurrentLimit != nil {
			t.Errorf("got %v, want OK, no limit, then MaxUint32 remaining", resp)
		}
		if resp := p.should(t, "unknown-domain", 0, d("key1", "v")); resp.OverallCode != pb.RateLimitResponse_OK {
			t.Errorf("unknown domain: %v, want OK", resp)
		}
	})
	t.Run("sliding log 30s", func(t *testing.T) {
		began := time.Now()
		for i := range 3 {
			resp := p.should(t, "e2e", 0, d("slide", "x"))
			cl := resp.Statuses[0].CurrentLimit
			if resp.OverallCode != pb.RateLimitResponse_OK || cl.GetUnit() != pb.RateLimitResponse_RateLimit_SECOND || cl.GetUnitMultiplier().GetValue() != 30 {
				t.Errorf("call %d: %v, want OK with 3 per SECOND×30", i+1, resp)
			}
		}
		resp := p.should(t, "e2e", 0, d("slide", "x"))
		// The first call's entry leaves the log 30 s after it was made:
		// at least 30 s less the time the four calls took (less a
		// second of rounding) from the 4th.
		took := time.Since(began)
		reset := resp.Statuses[0].DurationUntilReset.AsDuration()
		if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || reset < 29*time.Second-took || reset > 30*time.Second {
			t.Errorf("4th call, %v after the first: %v, want OVER_LIMIT until the first call's entry leaves the 30 s log", took, resp)
		}
	})
	t.Run("invalid argument", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, r := range []*pb.RateLimitRequest{
			{Descriptors: []*rlpb.RateLimitDescriptor{d("key1", "v")}},
			{Domain: "e2e"},
		} {
			if _, err := p.rls.ShouldRateLimit(ctx, r); status.Code(err) != codes.InvalidArgument {
				t.Errorf("ShouldRateLimit(%v) = %v, want InvalidArgument", r, err)
			}
		}
	})
	t.Run("http check", func(t *testing.T) {
		code, body := p.post(t, "/v1/check", `{"key":"tenant-1:/search","algorithm":"sliding_log","rate":5,"period":"1s","burst":0,"cost":1}`)
		if want := `{"allowed":true,"limit":5,"remaining":4,"retry_after_ms":0,"reset_after_ms":1000}`; code != 200 || strings.TrimSpace(body) != want {
			t.Errorf("POST /v1/check = %d %s, want 200 %s", code, body, want)
		}
	})
	t.Run("grpc health", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health = %v, %v, want SERVING", resp, err)
		}
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestE2EDefaultExampleAndEnv(t *testing.T) {
	p := start(t, []string{"SLUICE_RESPONSE_HEADERS=true"})
	resp := p.should(t, "example", 0, d("api_key", "k"), d("path", "/search/x"), d("path", "/healthz"))
	if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 4 || resp.Statuses[2].LimitRemaining != math.MaxUint32 {
		t.Errorf("example: %v, want OK, api_key 4 remaining, /healthz unlimited", resp)
	}
	if len(resp.ResponseHeadersToAdd) != 3 || resp.ResponseHeadersToAdd[1].Key != "RateLimit-Remaining" || resp.ResponseHeadersToAdd[1].Value != "4" {
		t.Errorf("SLUICE_RESPONSE_HEADERS=true: headers %v, want RateLimit-Remaining 4", resp.ResponseHeadersToAdd)
	}
	if code, _ := p.get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz = %d, want 200", code)
	}
	p.waitLog(t, `config="built-in example"`)
	// SIGHUP without --config neither kills the process nor changes anything.
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "nothing to reload")
	if code, _ := p.get(t, "/healthz"); code != 200 {
		t.Errorf("/healthz after SIGHUP = %d", code)
	}
}

func TestE2EReload(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "a.yaml")
	writeFile(t, cfg, "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	p := start(t, nil, "--config", dir, "--reload-interval", "50ms")
	limitOf := func() uint32 {
		return p.should(t, "r", 0, d("k", "v")).Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limitOf(); got != 5 {
		t.Fatalf("limit = %d, want 5", got)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A good change is picked up.
	writeFile(t, cfg, "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 7}\n")
	waitFor("the new limit 7", func() bool { return limitOf() == 7 })
	// A bad one is reported with its file and line, and the running one stays.
	writeFile(t, cfg, "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n")
	waitFor("the reload failure in the log", func() bool {
		return strings.Contains(p.stderr.String(), "configuration reload failed") && strings.Contains(p.stderr.String(), "a.yaml:4")
	})
	if got := limitOf(); got != 7 {
		t.Errorf("after a bad reload: limit %d, want 7 (kept)", got)
	}
	_, m := p.get(t, "/metrics")
	if !strings.Contains(m, `sluice_config_reloads_total{result="failure"} 1`) || !strings.Contains(m, `sluice_config_reloads_total{result="success"} 1`) {
		t.Errorf("reload metrics:\n%s", grepLines(m, "reload"))
	}
	// SIGHUP reloads even when nothing changed; a fixed file applies.
	writeFile(t, cfg, "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 11}\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitFor("the new limit 11", func() bool { return limitOf() == 11 })
}

func TestE2ESIGTERMDrains(t *testing.T) {
	p := start(t, nil, "--drain-delay", "1500ms")
	// A slow request: its body arrives in two parts.
	pr, pw := io.Pipe()
	type result struct {
		code int
		body string
		err  error
	}
	resc := make(chan result, 1)
	go func() {
		resp, err := http.Post(p.http+"/v1/check", "application/json", pr)
		if err != nil {
			resc <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		resc <- result{code: resp.StatusCode, body: string(b)}
	}()
	pw.Write([]byte(`{"key":"slow","algorithm":"gcra",`))
	time.Sleep(100 * time.Millisecond) // the request is in flight
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Readiness goes false first, while the listener still answers.
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := p.get(t, "/readyz")
		if code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d after SIGTERM", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// So does the gRPC health service, while calls are still answered.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hr, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health while draining = %v, %v, want NOT_SERVING", hr, err)
	}
	pw.Write([]byte(`"rate":1,"period":"1s"}`))
	pw.Close()
	r := <-resc
	if r.err != nil || r.code != 200 || !strings.Contains(r.body, `"allowed":true`) {
		t.Errorf("in-flight request = %d %s %v, want 200 allowed", r.code, r.body, r.err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	p.waitLog(t, "draining")
}

func TestE2EInvalidConfigAtStartup(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, cfg, "domain: x\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n      colour: red\n")
	cmd := exec.Command(binary, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("serve with a bad config: %v, want a non-zero exit\n%s", err, out)
	}
	if !strings.Contains(string(out), "bad.yaml:7") || !strings.Contains(string(out), "colour") {
		t.Errorf("stderr %q lacks bad.yaml:7 and the key", out)
	}
}

func TestE2ECommands(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, "domain: g\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	tests := []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{"check", good}, 0, "ok: 1 domain(s): g"},
		{[]string{"check", bad}, 1, "bad.yaml:4"},
		{[]string{"check"}, 2, "no files given"},
		{[]string{"version"}, 0, "sluice "},
		{[]string{"serve", "-h"}, 0, "SLUICE_FAILURE_MODE"},
		{[]string{"check", "-h"}, 0, "Usage: sluice check"},
		{[]string{"version", "-h"}, 0, "Usage: sluice version"},
		{[]string{"serve", "--failure-mode", "maybe"}, 2, "--failure-mode"},
		{[]string{"bogus"}, 2, "unknown command"},
		{nil, 2, "Usage:"},
	}
	for _, tt := range tests {
		out, err := exec.Command(binary, tt.args...).CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		if code != tt.wantCode || !strings.Contains(string(out), tt.wantOut) {
			t.Errorf("sluice %v = exit %d %q, want %d and %q", tt.args, code, out, tt.wantCode, tt.wantOut)
		}
	}
	// Environment variables set flags; a bad one names the variable.
	cmd := exec.Command(binary, "serve")
	cmd.Env = append(os.Environ(), "SLUICE_REPLICAS=many")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "SLUICE_REPLICAS") {
		t.Errorf("SLUICE_REPLICAS=many: %q, want the variable named", out)
	}
}

func TestE2ERedis(t *testing.T) {
	r := redistest.Server(t)
	cfg := filepath.Join(t.TempDir(), "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	// A generous deadline: a loaded test machine must not turn into
	// degraded decisions (the outage test covers those).
	p := start(t, nil, "--config", cfg, "--redis", "redis://"+r.Addr, "--redis-timeout", "5s")
	p.waitLog(t, `store="redis (failover fail_closed)"`)
	testReferenceBehaviour(t, p)
}

func TestE2ERedisTiered(t *testing.T) {
	r := redistest.Server(t)
	cfg := filepath.Join(t.TempDir(), "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	p := start(t, nil, "--config", cfg, "--redis", "redis://"+r.Addr, "--redis-timeout", "5s", "--tiered", "--lease-max", "10", "--lease-fraction", "0.5")
	p.waitLog(t, "tiered with leases")
	testReferenceBehaviour(t, p)
}

// When Redis stops answering, the breaker opens: /readyz fails (with
// --readyz-breaker), decisions are made by the failure policy at once and
// counted as degraded; when it answers again, all recovers.
func TestE2ERedisOutage(t *testing.T) {
	r := redistest.Server(t)
	cfg := filepath.Join(t.TempDir(), "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	p := start(t, nil, "--config", cfg, "--redis", "redis://"+r.Addr, "--readyz-breaker", "--redis-timeout", "500ms")
	if resp := p.should(t, "e2e", 0, d("key1", "outage")); resp.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("before the outage: %v", resp)
	}
	r.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := p.should(t, "e2e", 0, d("key1", "outage"))
		if code, _ := p.get(t, "/readyz"); code == 503 {
			if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				t.Errorf("fail closed with the breaker open: %v, want OVER_LIMIT", resp)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not fail after Redis was killed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fastest := time.Hour
	for range 5 {
		start := time.Now()
		p.should(t, "e2e", 0, d("key1", "outage"))
		fastest = min(fastest, time.Since(start))
	}
	// A decision that waited for the store would take the timeout: the
	// fastest of five under it shows none did, however busy the machine.
	if fastest >= 500*time.Millisecond {
		t.Errorf("decisions with the breaker open took at least %v, want under the 500ms timeout", fastest)
	}
	_, m := p.get(t, "/metrics")
	if !strings.Contains(m, `sluice_breaker_open 1`) || !strings.Contains(m, `sluice_degraded_decisions_total{allowed="false",policy="fail_closed"}`) {
		t.Errorf("metrics during the outage:\n%s", grepLines(m, "breaker")+"\n"+grepLines(m, "degraded"))
	}
	r.Restart()
	deadline = time.Now().Add(10 * time.Second)
	for {
		if code, _ := p.get(t, "/readyz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not recover after Redis restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if resp := p.should(t, "e2e", 0, d("key1", "outage2")); resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 19 {
		t.Errorf("after recovery: %v, want OK with 19 remaining", resp)
	}
}

// SIGTERM lets an in-flight gRPC call finish: the call waits on a paused
// Redis, SIGTERM arrives, Redis resumes, the call is answered, then sluice
// exits 0.
func TestE2ESIGTERMDrainsGRPC(t *testing.T) {
	eachGRPCTransport(t, testSIGTERMDrainsGRPC)
}

func testSIGTERMDrainsGRPC(t *testing.T, transport ...string) {
	r := redistest.Server(t)
	cfg := filepath.Join(t.TempDir(), "e2e.yaml")
	writeFile(t, cfg, e2eConfig)
	p := start(t, nil, append(transport, "--config", cfg, "--redis", "redis://"+r.Addr, "--redis-timeout", "10s")...)
	p.should(t, "e2e", 0, d("key1", "warm")) // scripts loaded, connection up
	r.Pause()
	type result struct {
		resp *pb.RateLimitResponse
		err  error
	}
	resc := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*rlpb.RateLimitDescriptor{d("key1", "inflight")}})
		resc <- result{resp, err}
	}()
	time.Sleep(200 * time.Millisecond) // the call is waiting on Redis
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "draining")
	select {
	case <-p.done:
		t.Fatal("sluice exited with a call in flight")
	case <-time.After(200 * time.Millisecond):
	}
	r.Resume()
	res := <-resc
	if res.err != nil || res.resp.OverallCode != pb.RateLimitResponse_OK || res.resp.Statuses[0].LimitRemaining != 19 {
		t.Errorf("in-flight call = %v, %v, want OK with 19 remaining", res.resp, res.err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

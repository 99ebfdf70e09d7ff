package main

import (
	"context"
	"net/http"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/service/tracing/otlptest"
)

const tracingConfig = `domain: tr
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// The callers' trace contexts: Envoy's span of the ShouldRateLimit call,
// and an HTTP client's span of the /v1/check and /json calls.
const (
	grpcTrace, grpcParent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	httpTrace, httpParent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	jsonTrace, jsonParent = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
	rlsSpan               = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
)

func tracingConfigDir(t *testing.T) string {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "tr.yaml"), tracingConfig)
	return dir
}

// sendTraced sends a ShouldRateLimit call with two descriptors (one
// all-or-nothing store call) and a traceparent in its metadata, a
// /v1/check and a /json request with a traceparent header.
func sendTraced(t *testing.T, grpcAddr, httpURL string) {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+grpcTrace+"-"+grpcParent+"-01")
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "tr", HitsAddend: 2,
		Descriptors: []*rlpb.RateLimitDescriptor{d("a", "tenant-1"), d("b", "tenant-1")}})
	if err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v, %v", resp, err)
	}
	post := func(path, trace, parent, body string) {
		req, _ := http.NewRequest("POST", httpURL+path, strings.NewReader(body))
		req.Header.Set("traceparent", "00-"+trace+"-"+parent+"-01")
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("POST %s: %d", path, res.StatusCode)
		}
	}
	post("/v1/check", httpTrace, httpParent, `{"key":"user-7","algorithm":"gcra","rate":5,"period":"1s","cost":3}`)
	post("/json", jsonTrace, jsonParent, `{"domain":"tr","descriptors":[{"entries":[{"key":"a","value":"tenant-2"}]}]}`)
}

// tracedComplete reports whether spans hold every span sendTraced causes.
func tracedComplete(spans []otlptest.Span) bool {
	return len(otlptest.Named(spans, rlsSpan)) == 1 && len(otlptest.Named(spans, "store.AllowMulti")) == 1 &&
		len(otlptest.Named(spans, "POST /v1/check")) == 1 && len(otlptest.Named(spans, "POST /json")) == 1 &&
		len(otlptest.Named(spans, "store.AllowN")) == 2
}

// checkTraced checks the spans of sendTraced: each server span a child of
// the caller's, with the decision's attributes, and the store calls under
// them.
func checkTraced(t *testing.T, spans []otlptest.Span, service string) {
	t.Helper()
	one := func(name, trace string) otlptest.Span {
		t.Helper()
		for _, s := range otlptest.Named(spans, name) {
			if s.TraceID == trace {
				return s
			}
		}
		t.Fatalf("no span %q in trace %s: %+v", name, trace, spans)
		return otlptest.Span{}
	}
	attr := func(s otlptest.Span, k string, want any) {
		t.Helper()
		if got := s.Attrs[k]; !equalAny(got, want) {
			t.Errorf("span %q: %s = %#v, want %#v", s.Name, k, got, want)
		}
	}
	rls := one(rlsSpan, grpcTrace)
	if rls.ParentID != grpcParent || rls.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("ShouldRateLimit span: parent %s kind %v, want the caller's %s, server", rls.ParentID, rls.Kind, grpcParent)
	}
	attr(rls, "sluice.domain", "tr")
	attr(rls, "sluice.descriptors", int64(2))
	attr(rls, "sluice.hits", int64(4))
	attr(rls, "sluice.rules", []any{"tr.a", "tr.b"})
	attr(rls, "sluice.result", "OK")
	attr(rls, "sluice.degraded", false)
	attr(rls, "sluice.domain_known", true)
	attr(rls, "rpc.grpc.status_code", int64(0))
	if _, ok := rls.Attrs["sluice.descriptor_entries"]; ok {
		t.Errorf("descriptor values exported without --tracing-keys: %v", rls.Attrs)
	}
	if got := rls.Resource["service.name"]; got != service {
		t.Errorf("service.name = %v, want %s", got, service)
	}
	multi := one("store.AllowMulti", grpcTrace)
	if multi.ParentID != rls.SpanID {
		t.Errorf("store span's parent %s, want the ShouldRateLimit span %s", multi.ParentID, rls.SpanID)
	}
	attr(multi, "sluice.requests", int64(2))
	attr(multi, "sluice.allowed", true)
	if _, ok := multi.Attrs["sluice.key"]; ok {
		t.Errorf("keys exported without --tracing-keys: %v", multi.Attrs)
	}

	check := one("POST /v1/check", httpTrace)
	if check.ParentID != httpParent || check.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("/v1/check span: parent %s kind %v, want %s, server", check.ParentID, check.Kind, httpParent)
	}
	attr(check, "http.response.status_code", int64(200))
	attr(check, "sluice.algorithm", "gcra")
	attr(check, "sluice.n", int64(3))
	attr(check, "sluice.result", "OK")
	attr(check, "sluice.degraded", false)
	if st := one("store.AllowN", httpTrace); st.ParentID != check.SpanID {
		t.Errorf("/v1/check store span's parent %s, want %s", st.ParentID, check.SpanID)
	}

	js := one("POST /json", jsonTrace)
	if js.ParentID != jsonParent {
		t.Errorf("/json span's parent %s, want %s", js.ParentID, jsonParent)
	}
	attr(js, "sluice.rules", []any{"tr.a"})
	attr(js, "sluice.descriptors", int64(1))
	if st := one("store.AllowN", jsonTrace); st.ParentID != js.SpanID {
		t.Errorf("/json store span's parent %s, want %s", st.ParentID, js.SpanID)
	}
}

func equalAny(a, b any) bool {
	as, ok1 := a.([]any)
	bs, ok2 := b.([]any)
	if ok1 && ok2 {
		return slices.Equal(as, bs)
	}
	return a == b
}

// exporterRunning reports whether the process runs the SDK's batch span
// processor (the exporter's goroutine).
func exporterRunning() bool {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	return strings.Contains(b.String(), "go.opentelemetry.io/otel/sdk/trace")
}

// stopInProcess ends p's serve and waits for it (its spans flushed).
func stopInProcess(t *testing.T, p *inproc) {
	t.Helper()
	p.cancel()
	select {
	case code := <-p.done:
		p.done <- code // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestTracingInProcess(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	r := otlptest.Start(t)
	p := serveInProcess(t, nil, "--config", tracingConfigDir(t), "--tracing-endpoint", "http://"+r.Addr)
	if !exporterRunning() {
		t.Error("tracing on, but no batch span processor runs")
	}
	sendTraced(t, p.grpc, p.http)
	spans := r.Wait(t, 10*time.Second, tracedComplete)
	checkTraced(t, spans, "sluice")
	stopInProcess(t, p)
	if exporterRunning() {
		t.Error("the span processor still runs after serve returned")
	}
}

// OTLP over HTTP: --tracing-protocol http/protobuf and a base URL.
func TestTracingHTTPProtocol(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	r := otlptest.Start(t)
	p := serveInProcess(t, nil, "--config", tracingConfigDir(t), "--tracing-endpoint", "http://"+r.HTTPAddr,
		"--tracing-protocol", "http/protobuf", "--tracing-service-name", "over-http")
	sendTraced(t, p.grpc, p.http)
	checkTraced(t, r.Wait(t, 10*time.Second, tracedComplete), "over-http")
}

func TestTracingKeys(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	r := otlptest.Start(t)
	p := serveInProcess(t, nil, "--config", tracingConfigDir(t), "--tracing-endpoint", "http://"+r.Addr, "--tracing-keys")
	sendTraced(t, p.grpc, p.http)
	spans := r.Wait(t, 10*time.Second, tracedComplete)
	for _, s := range otlptest.Named(spans, rlsSpan) {
		if got, want := s.Attrs["sluice.descriptor_entries"], []any{"a=tenant-1", "b=tenant-1"}; !equalAny(got, want) {
			t.Errorf("descriptor entries %v, want %v", got, want)
		}
	}
	for _, s := range otlptest.Named(spans, "store.AllowMulti") {
		if k, _ := s.Attrs["sluice.key"].([]any); len(k) != 2 || !strings.Contains(k[0].(string), "tenant-1") {
			t.Errorf("store keys %v, want the two counters of tenant-1", s.Attrs["sluice.key"])
		}
	}
	for _, s := range otlptest.Named(spans, "POST /v1/check") {
		if got := s.Attrs["sluice.key"]; got != "user-7" {
			t.Errorf("/v1/check key %v, want user-7", got)
		}
	}
}

// With tracing off (no flag, no OTEL_EXPORTER_OTLP_* endpoint) nothing is
// exported and no exporter runs, even with the other OTEL_* variables set.
func TestTracingOffInProcess(t *testing.T) {
	r := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_SERVICE_NAME", "sluice-off")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	p := serveInProcess(t, nil, "--config", tracingConfigDir(t))
	sendTraced(t, p.grpc, p.http)
	if exporterRunning() {
		t.Error("tracing off, but the SDK's span processor runs")
	}
	stopInProcess(t, p) // a running exporter would flush here
	if n := r.Exports(); n != 0 {
		t.Errorf("tracing off: the receiver got %d exports: %+v", n, r.Spans())
	}
}

// The built binary, configured by the OTEL_* variables alone.
func TestTracingBinary(t *testing.T) {
	r := otlptest.Start(t)
	p := start(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + r.Addr, "OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=edge-limiter"}, "--config", tracingConfigDir(t))
	sendTraced(t, p.grpc, p.http)
	spans := r.Wait(t, 10*time.Second, tracedComplete)
	checkTraced(t, spans, "edge-limiter")
	if !strings.Contains(p.stderr.String(), "tracing on") {
		t.Errorf("no 'tracing on' in the log:\n%s", p.stderr)
	}
}

func TestTracingOffBinary(t *testing.T) {
	r := otlptest.Start(t)
	p := start(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_BSP_SCHEDULE_DELAY=100"},
		"--config", tracingConfigDir(t))
	sendTraced(t, p.grpc, p.http)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if n := r.Exports(); n != 0 {
		t.Errorf("tracing off: the receiver got %d exports: %+v", n, r.Spans())
	}
	if strings.Contains(p.stderr.String(), "tracing on") {
		t.Errorf("tracing on without an endpoint:\n%s", p.stderr)
	}
}

// Package tracing is sluice serve's OpenTelemetry tracing: an OTLP exporter
// configured by the standard OTEL_* variables, a server span for each
// ShouldRateLimit call and each HTTP decision endpoint, continued from the
// caller's W3C trace context, the Tracer that the decision engine and the
// observed store (service/metrics.Observe) start their spans with, and the
// attribute keys of those spans.
//
// Tracing is off unless asked for: with it off, nothing here runs, no
// exporter is started and no tracer provider is installed; the servers and
// the engine hold a nil *Tracer and skip every span.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// DefaultServiceName is the service.name of sluice's spans unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names another.
const DefaultServiceName = "sluice"

// ScopeName is the instrumentation scope of sluice's spans.
const ScopeName = "github.com/sluicehq/sluice"

// Protocols of the OTLP exporter.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config says whether and where to export traces. The exporter reads the
// rest of its configuration from the OTEL_* variables itself.
type Config struct {
	// Enabled turns tracing on even with no endpoint set (the exporter
	// then sends to its default, localhost:4317 or :4318).
	Enabled bool
	// Endpoint is the collector's address, a URL (http://host:4317) or
	// host:port; empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT. Setting it turns tracing on.
	Endpoint string
	// Protocol is ProtocolGRPC or ProtocolHTTP; empty:
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL, else
	// grpc.
	Protocol string
	// ServiceName replaces DefaultServiceName; OTEL_SERVICE_NAME still
	// wins over it.
	ServiceName string
	// ServiceNamespace and ServiceInstanceID, when not empty, are the
	// resource's service.namespace and service.instance.id. They win over
	// the same attributes in OTEL_RESOURCE_ATTRIBUTES, which still sets
	// them when these are empty.
	ServiceNamespace, ServiceInstanceID string
	// SampleRatio, when >= 0, samples that share of the traces that do not
	// come sampled or not from the caller (parentbased_traceidratio);
	// below 0, OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG decide
	// (default parentbased_always_on).
	SampleRatio float64
	// Keys adds the descriptors' entries and the counters' keys to the
	// spans: callers' data, off by default.
	Keys bool
	// Lookup reads the variables that decide On and the protocol
	// (os.LookupEnv when nil); the exporter and the SDK read the process's
	// environment themselves.
	Lookup func(string) (string, bool)
}

// On reports whether c turns tracing on: Enabled, an Endpoint, or
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set
// (non-empty); OTEL_SDK_DISABLED=true turns it off whatever the rest says.
func (c Config) On() bool {
	if v, _ := c.lookup("OTEL_SDK_DISABLED"); strings.EqualFold(strings.TrimSpace(v), "true") {
		return false
	}
	if c.Enabled || c.Endpoint != "" {
		return true
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v, ok := c.lookup(k); ok && strings.TrimSpace(v) != "" {
			return true
		}
	}
	return false
}

func (c Config) lookup(k string) (string, bool) {
	if c.Lookup != nil {
		return c.Lookup(k)
	}
	return os.LookupEnv(k)
}

// protocol is the exporter's protocol: the configured one, else the
// OTEL_* variables', else grpc.
func (c Config) protocol() (string, error) {
	p := c.Protocol
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p != "" {
			break
		}
		p, _ = c.lookup(k)
		p = strings.TrimSpace(p)
	}
	switch p {
	case "", ProtocolGRPC:
		return ProtocolGRPC, nil
	case ProtocolHTTP, "http":
		return ProtocolHTTP, nil
	}
	return "", fmt.Errorf("OTLP protocol %q: want grpc or http/protobuf", p)
}

// Bounds of what a span takes from a request: its strings are the
// caller's, and a span holds them until the exporter sends it (the queue
// holds up to 2048 spans, a batch 512). Within them, a span's
// request-chosen attributes, status and events hold at most some 5.5 KB,
// so that a batch of 512 spans stays below the 4 MiB a collector accepts
// by default (a batch over it is refused whole, other callers' spans
// with it).
const (
	// MaxAttrBytes bounds a string attribute taken from a request (a
	// domain, a key, a descriptor's entries, an error's message).
	MaxAttrBytes = 256
	// MaxAttrListBytes bounds a list of them (the entries of every
	// descriptor of a request), in all.
	MaxAttrListBytes = 2048
	// MaxTraceStateBytes bounds a caller's tracestate; a longer one is
	// dropped (the W3C trace context lets a vendor drop one longer than
	// 512 characters), the traceparent kept.
	MaxTraceStateBytes = 512
)

// truncated marks a string cut to its bound.
const truncated = "…"

// Bound returns s cut to max bytes (at a character's boundary, the cut
// marked "…"). A cut string is a copy: the span does not keep the
// request's memory alive.
func Bound(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max - len(truncated)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.Clone(s[:n]) + truncated
}

// String is the attribute k of v, a string taken from a request, cut to
// MaxAttrBytes.
func String(k, v string) attribute.KeyValue { return attribute.String(k, Bound(v, MaxAttrBytes)) }

// Strings is the attribute k of vs, strings taken from a request: each cut
// to MaxAttrBytes, and as many as MaxAttrListBytes holds (a last "…" says
// that some were left out).
func Strings(k string, vs []string) attribute.KeyValue {
	out := make([]string, 0, len(vs))
	n := 0
	for _, v := range vs {
		v = Bound(v, MaxAttrBytes)
		if n+len(v) > MaxAttrListBytes {
			out = append(out, truncated)
			break
		}
		n += len(v)
		out = append(out, v)
	}
	return attribute.StringSlice(k, out)
}

// spanLimits are the SDK's limits (OTEL_SPAN_* and OTEL_ATTRIBUTE_*), with
// an attribute's value at most MaxAttrBytes whatever they say: the SDK's
// own cut, behind sluice's, for any attribute sluice did not bound.
func spanLimits() sdktrace.SpanLimits {
	l := sdktrace.NewSpanLimits()
	if l.AttributeValueLengthLimit < 0 || l.AttributeValueLengthLimit > MaxAttrBytes {
		l.AttributeValueLengthLimit = MaxAttrBytes
	}
	return l
}

// Provider is a running exporter and the Tracer that feeds it.
type Provider struct {
	tp     *sdktrace.TracerProvider
	Tracer *Tracer
}

// Start starts the exporter and the tracer provider of c, or returns nil
// (and no error) when c does not turn tracing on. Export errors are logged
// to log, at most one a minute.
func Start(ctx context.Context, c Config, log *slog.Logger) (*Provider, error) {
	if !c.On() {
		return nil, nil
	}
	if c.SampleRatio > 1 || c.SampleRatio != c.SampleRatio {
		return nil, fmt.Errorf("sample ratio %v: want 0 to 1", c.SampleRatio)
	}
	exp, err := c.exporter(ctx)
	if err != nil {
		return nil, err
	}
	name := DefaultServiceName
	if c.ServiceName != "" {
		name = c.ServiceName
	}
	// Later detectors win: OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
	// over the default name, the namespace and instance given over
	// OTEL_RESOURCE_ATTRIBUTES.
	var given []attribute.KeyValue
	if c.ServiceNamespace != "" {
		given = append(given, attribute.String("service.namespace", c.ServiceNamespace))
	}
	if c.ServiceInstanceID != "" {
		given = append(given, attribute.String("service.instance.id", c.ServiceInstanceID))
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", name)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
		resource.WithAttributes(given...))
	if err != nil {
		if res == nil {
			return nil, fmt.Errorf("resource: %w", err)
		}
		if log != nil {
			log.Warn("tracing: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME in part not read", "err", err)
		}
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSpanLimits(spanLimits())}
	if c.SampleRatio >= 0 {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	if log != nil {
		otel.SetErrorHandler(rateLimitedLog(log))
	}
	return &Provider{tp: tp, Tracer: New(tp, c.Keys)}, nil
}

func (c Config) exporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	proto, err := c.protocol()
	if err != nil {
		return nil, err
	}
	ep := c.Endpoint
	url := strings.Contains(ep, "://")
	if proto == ProtocolHTTP {
		var opts []otlptracehttp.Option
		switch {
		case url:
			// As OTEL_EXPORTER_OTLP_ENDPOINT: a base URL gets the traces'
			// path.
			if u, err := neturl.Parse(ep); err == nil && (u.Path == "" || u.Path == "/") {
				u.Path = "/v1/traces"
				ep = u.String()
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(ep))
		case ep != "":
			opts = append(opts, otlptracehttp.WithEndpoint(ep))
		}
		return otlptrace.New(ctx, otlptracehttp.NewClient(opts...))
	}
	var opts []otlptracegrpc.Option
	switch {
	case url:
		opts = append(opts, otlptracegrpc.WithEndpointURL(ep))
	case ep != "":
		opts = append(opts, otlptracegrpc.WithEndpoint(ep))
	}
	return otlptrace.New(ctx, otlptracegrpc.NewClient(opts...))
}

// Shutdown flushes the spans still queued and stops the exporter, within
// ctx. A nil Provider does nothing.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}

// rateLimitedLog logs the SDK's errors (a collector down) at most once a
// minute.
func rateLimitedLog(log *slog.Logger) otel.ErrorHandlerFunc {
	var mu sync.Mutex
	var last time.Time
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(last) >= time.Minute {
			last = now
			log.Warn("tracing: export failed", "err", err)
		}
	}
}

// Tracer starts sluice's spans. A nil *Tracer is tracing off: callers
// check for nil and start nothing.
type Tracer struct {
	tr   trace.Tracer
	prop propagation.TextMapPropagator
	keys bool
}

// New returns a Tracer on tp (which may be a test's provider); keys adds
// the callers' keys and descriptor values to the spans.
func New(tp trace.TracerProvider, keys bool) *Tracer {
	return &Tracer{
		tr:   tp.Tracer(ScopeName),
		prop: boundedState{propagation.TraceContext{}}, // W3C traceparent and tracestate; no baggage: sluice reads none
		keys: keys,
	}
}

// boundedState is a propagator that drops a caller's tracestate longer
// than MaxTraceStateBytes (every span of the trace would carry it).
type boundedState struct{ propagation.TextMapPropagator }

func (b boundedState) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	return b.TextMapPropagator.Extract(ctx, stateCarrier{c})
}

type stateCarrier struct{ propagation.TextMapCarrier }

func (c stateCarrier) Get(k string) string {
	v := c.TextMapCarrier.Get(k)
	if k == "tracestate" && len(v) > MaxTraceStateBytes {
		return ""
	}
	return v
}

// Keys reports whether spans carry the callers' keys and descriptor values.
func (t *Tracer) Keys() bool { return t.keys }

// Start starts an internal span named name, a child of ctx's span.
func (t *Tracer) Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tr.Start(ctx, name, trace.WithAttributes(attrs...))
}

// End ends span, recording err (nil for none) as its error: an
// exception event, as span.RecordError writes it, and the status, its
// message cut to MaxAttrBytes (an error may quote a request).
func End(span trace.Span, err error) {
	if err != nil {
		msg := Bound(err.Error(), MaxAttrBytes)
		span.AddEvent("exception", trace.WithAttributes(
			attribute.String("exception.type", fmt.Sprintf("%T", err)),
			attribute.String("exception.message", msg)))
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// Annotate adds attrs to ctx's span when it records (a sampled server
// span); it does nothing otherwise.
func Annotate(ctx context.Context, attrs ...attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrs...)
	}
}

// UnaryInterceptor starts a server span for every unary call of the
// rate-limit service (the health checks are not traced), continuing the
// caller's trace context from the call's metadata (traceparent,
// tracestate).
func (t *Tracer) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		name := strings.TrimPrefix(info.FullMethod, "/")
		svc, method, _ := strings.Cut(name, "/")
		if !strings.HasPrefix(svc, "envoy.service.ratelimit.") {
			return h(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		ctx = t.prop.Extract(ctx, mdCarrier(md))
		ctx, span := t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("rpc.system", "grpc"),
			attribute.String("rpc.service", svc),
			attribute.String("rpc.method", method)))
		defer span.End()
		resp, err := h(ctx, req)
		st, _ := status.FromError(err)
		span.SetAttributes(attribute.Int64("rpc.grpc.status_code", int64(st.Code())))
		if err != nil {
			span.SetStatus(codes.Error, Bound(st.Message(), MaxAttrBytes))
		}
		return resp, err
	}
}

// mdCarrier reads a propagator's fields from gRPC metadata.
type mdCarrier metadata.MD

func (c mdCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }

func (c mdCarrier) Keys() []string {
	ks := make([]string, 0, len(c))
	for k := range c {
		ks = append(ks, k)
	}
	return ks
}

// Handler wraps h, the endpoint route ("POST /v1/check"), in a server span
// named route, continuing the caller's trace context from the request's
// headers.
func (t *Tracer) Handler(route string, h http.Handler) http.Handler {
	method, path, _ := strings.Cut(route, " ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tr.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", method),
			attribute.String("http.route", path)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
		if sw.code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.code))
		}
	})
}

// statusWriter records the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

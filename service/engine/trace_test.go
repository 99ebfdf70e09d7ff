package engine

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/tracing"
)

// degradedStore marks its store's decisions degraded, as a failover
// store's made without the shared store.
type degradedStore struct{ sluice.Store }

func (s degradedStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	d, err := s.Store.AllowN(ctx, key, lim, n)
	d.Degraded = true
	return d, err
}

// traced decides ds in a server span of a recording provider, and returns
// the ended spans: the server span last.
func traced(t *testing.T, e *Engine, tp *sdktrace.TracerProvider, rec *tracetest.SpanRecorder, ds ...Descriptor) ([]sdktrace.ReadOnlySpan, error) {
	t.Helper()
	ctx, span := tp.Tracer("test").Start(context.Background(), "server")
	_, err := e.Decide(ctx, &Request{Domain: "t", Descriptors: ds})
	span.End()
	return rec.Ended(), err
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func newTraced(t *testing.T, keys bool, wrap func(sluice.Store) sluice.Store) (*Engine, *sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	e, _, _ := newEngine(t, WithTracer(tracing.New(tp, keys)))
	if wrap != nil {
		e = New(wrap(e.store), e.Config(), WithTracer(tracing.New(tp, keys)))
	}
	return e, tp, rec
}

// A decision's attributes go on the caller's span; the engine starts no
// span of its own (the store calls are traced by the observed store,
// service/metrics.Observe).
func TestTraceDecision(t *testing.T) {
	e, tp, rec := newTraced(t, false, nil)
	spans, err := traced(t, e, tp, rec, d("fw", "a", 2), d("ten", "a", 1), d("shadow", "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 1 || spans[0].Name() != "server" {
		t.Fatalf("spans %v, want the server span alone", spans)
	}
	a := attrsOf(spans[0])
	if got := a[tracing.AttrRules].AsStringSlice(); !slices.Equal(got, []string{"t.fw", "t.ten", "t.shadow"}) {
		t.Errorf("rules %v", got)
	}
	if a[tracing.AttrHits].AsInt64() != 4 || a[tracing.AttrDescriptors].AsInt64() != 3 || a[tracing.AttrResult].AsString() != "OK" || a[tracing.AttrDegraded].AsBool() {
		t.Errorf("server span attributes %v", a)
	}
	if _, ok := a[tracing.AttrValues]; ok {
		t.Errorf("descriptor entries without keys: %v", a)
	}
}

func TestTraceDenied(t *testing.T) {
	e, tp, rec := newTraced(t, true, nil)
	spans, _ := traced(t, e, tp, rec, d("blocked", "b", 1), d("fw", "x", 6))
	a := attrsOf(spans[len(spans)-1])
	if a[tracing.AttrResult].AsString() != "OVER_LIMIT" || !a[tracing.AttrDenied].AsBool() {
		t.Errorf("denied: %v", a)
	}
	if got := a[tracing.AttrValues].AsStringSlice(); !slices.Equal(got, []string{"blocked=b", "fw=x"}) {
		t.Errorf("descriptor entries %v", got)
	}
}

// A decision that a store made without the shared store is degraded on
// the caller's span.
func TestTraceDegraded(t *testing.T) {
	e, tp, rec := newTraced(t, false, func(s sluice.Store) sluice.Store { return degradedStore{s} })
	spans, err := traced(t, e, tp, rec, d("fw", "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if a := attrsOf(spans[len(spans)-1]); !a[tracing.AttrDegraded].AsBool() {
		t.Errorf("degraded not traced: %v", a)
	}
}

// An unknown domain is traced too, with no rules.
func TestTraceUnknown(t *testing.T) {
	e, tp, rec := newTraced(t, false, nil)
	ctx, span := tp.Tracer("test").Start(context.Background(), "server")
	if _, err := e.Decide(ctx, &Request{Domain: "nope", Descriptors: []Descriptor{d("k", "v", 3)}}); err != nil {
		t.Fatal(err)
	}
	span.End()
	a := attrsOf(rec.Ended()[0])
	if a[tracing.AttrKnown].AsBool() || a[tracing.AttrHits].AsInt64() != 3 || a[tracing.AttrResult].AsString() != "OK" || len(a[tracing.AttrRules].AsStringSlice()) != 0 {
		t.Errorf("unknown domain: %v", a)
	}
}

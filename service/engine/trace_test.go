package engine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/tracing"
)

// faultStore fails every call with err, or marks its decisions degraded.
type faultStore struct {
	sluice.Store
	err      error
	degraded bool
}

func (f *faultStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if f.err != nil {
		return sluice.Decision{}, f.err
	}
	d, err := f.Store.AllowN(ctx, key, lim, n)
	d.Degraded = f.degraded
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

func TestTraceDecision(t *testing.T) {
	e, tp, rec := newTraced(t, false, nil)
	spans, err := traced(t, e, tp, rec, d("fw", "a", 2), d("ten", "a", 1), d("shadow", "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, s := range spans {
		names = append(names, s.Name())
	}
	if want := []string{"store.AllowMulti", "store.AllowN", "server"}; !slices.Equal(names, want) {
		t.Fatalf("spans %v, want %v", names, want)
	}
	srv := spans[2]
	for _, s := range spans[:2] {
		if s.Parent().SpanID() != srv.SpanContext().SpanID() {
			t.Errorf("%s: parent %v, want the server span", s.Name(), s.Parent().SpanID())
		}
	}
	a := attrsOf(srv)
	if got := a[AttrRules].AsStringSlice(); !slices.Equal(got, []string{"t.fw", "t.ten", "t.shadow"}) {
		t.Errorf("rules %v", got)
	}
	if a[AttrHits].AsInt64() != 4 || a[AttrDescriptors].AsInt64() != 3 || a[AttrResult].AsString() != "OK" || a[AttrDegraded].AsBool() {
		t.Errorf("server span attributes %v", a)
	}
	if _, ok := a[AttrValues]; ok {
		t.Errorf("descriptor entries without keys: %v", a)
	}
	if m := attrsOf(spans[0]); m[AttrRequests].AsInt64() != 2 || !m[AttrAllowed].AsBool() {
		t.Errorf("AllowMulti attributes %v", m)
	}
}

func TestTraceDenied(t *testing.T) {
	e, tp, rec := newTraced(t, true, nil)
	spans, _ := traced(t, e, tp, rec, d("blocked", "b", 1), d("fw", "x", 6))
	a := attrsOf(spans[len(spans)-1])
	if a[AttrResult].AsString() != "OVER_LIMIT" || !a[AttrDenied].AsBool() {
		t.Errorf("denied: %v", a)
	}
	if got := a[AttrValues].AsStringSlice(); !slices.Equal(got, []string{"blocked=b", "fw=x"}) {
		t.Errorf("descriptor entries %v", got)
	}
}

func TestTraceStoreError(t *testing.T) {
	boom := errors.New("redis: connection refused")
	e, tp, rec := newTraced(t, true, func(s sluice.Store) sluice.Store { return &faultStore{Store: s, err: boom} })
	spans, err := traced(t, e, tp, rec, d("fw", "a", 1))
	if err == nil {
		t.Fatal("no error")
	}
	st := spans[0]
	if st.Name() != "store.AllowN" || st.Status().Code != codes.Error || st.Status().Description != boom.Error() || len(st.Events()) != 1 {
		t.Errorf("store span %s: status %v, events %v", st.Name(), st.Status(), st.Events())
	}
	if k := attrsOf(st)[AttrKey].AsString(); k == "" {
		t.Errorf("no key with keys on: %v", attrsOf(st))
	}
}

func TestTraceDegradedAndRefund(t *testing.T) {
	e, tp, rec := newTraced(t, false, func(s sluice.Store) sluice.Store { return &faultStore{Store: s, degraded: true} })
	spans, err := traced(t, e, tp, rec, d("fw", "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if !attrsOf(spans[1])[AttrDegraded].AsBool() || !attrsOf(spans[0])[AttrDegraded].AsBool() {
		t.Errorf("degraded not traced: %v / %v", attrsOf(spans[1]), attrsOf(spans[0]))
	}
	e, tp, rec = newTraced(t, false, nil)
	spans, err = traced(t, e, tp, rec, refund("fw", "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if spans[0].Name() != "store.Return" || spans[0].Parent().SpanID() != spans[1].SpanContext().SpanID() {
		t.Errorf("refund spans %v", spans)
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
	if a[AttrKnown].AsBool() || a[AttrHits].AsInt64() != 3 || a[AttrResult].AsString() != "OK" || len(a[AttrRules].AsStringSlice()) != 0 {
		t.Errorf("unknown domain: %v", a)
	}
}

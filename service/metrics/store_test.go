package metrics

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/tracing"
)

const testConfig = `
domain: t
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// calls records every StoreCall.
type calls struct {
	mu   sync.Mutex
	errs []error
}

func (c *calls) StoreCall(d time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

func (c *calls) take() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.errs
	c.errs = nil
	return e
}

// faultStore fails every AllowN with err, or marks its decisions degraded.
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

// traced is an engine deciding testConfig through the memory store (wrapped
// by wrap when not nil) observed by a recorder and traced by a recording
// provider (keys: the tracer's Keys).
type traced struct {
	e     *engine.Engine
	tp    *sdktrace.TracerProvider
	spans *tracetest.SpanRecorder
	calls *calls
}

func newTraced(t *testing.T, keys bool, wrap func(sluice.Store) sluice.Store) *traced {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	ms := memstore.New()
	t.Cleanup(func() { ms.Close() })
	var st sluice.Store = ms
	if wrap != nil {
		st = wrap(st)
	}
	tr := &traced{spans: tracetest.NewSpanRecorder(), calls: &calls{}}
	tr.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tr.spans))
	t.Cleanup(func() { tr.tp.Shutdown(context.Background()) })
	tracer := tracing.New(tr.tp, keys)
	tr.e = engine.New(Observe(st, tr.calls, tracer), cfg, engine.WithTracer(tracer))
	return tr
}

// decide decides ds in a server span and returns the ended spans, the
// server span last.
func (tr *traced) decide(t *testing.T, ds ...engine.Descriptor) ([]sdktrace.ReadOnlySpan, error) {
	t.Helper()
	tr.spans.Reset()
	ctx, span := tr.tp.Tracer("test").Start(context.Background(), "server")
	_, err := tr.e.Decide(ctx, &engine.Request{Domain: "t", Descriptors: ds})
	span.End()
	return tr.spans.Ended(), err
}

func desc(key, value string, hits int) engine.Descriptor {
	return engine.Descriptor{Entries: []engine.Entry{{Key: key, Value: value}}, Hits: uint64(hits), HasHits: true}
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var ns []string
	for _, s := range spans {
		ns = append(ns, s.Name())
	}
	return ns
}

// A decision's store calls are each observed once, in a child span of the
// caller's, and timed once.
func TestObserveDecision(t *testing.T) {
	tr := newTraced(t, false, nil)
	spans, err := tr.decide(t, desc("fw", "a", 2), desc("ten", "a", 1), desc("shadow", "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"store.AllowMulti", "store.AllowN", "server"}; !slices.Equal(names(spans), want) {
		t.Fatalf("spans %v, want %v", names(spans), want)
	}
	srv := spans[2]
	for _, s := range spans[:2] {
		if s.Parent().SpanID() != srv.SpanContext().SpanID() {
			t.Errorf("%s: parent %v, want the server span", s.Name(), s.Parent().SpanID())
		}
	}
	if m := attrsOf(spans[0]); m[tracing.AttrRequests].AsInt64() != 2 || !m[tracing.AttrAllowed].AsBool() || m[tracing.AttrDegraded].AsBool() {
		t.Errorf("AllowMulti attributes %v", m)
	}
	if _, ok := attrsOf(spans[0])[tracing.AttrKey]; ok {
		t.Errorf("keys without Keys: %v", attrsOf(spans[0]))
	}
	if m := attrsOf(spans[1]); m[tracing.AttrAlgorithm].AsString() != "fixed_window" || m[tracing.AttrN].AsInt64() != 1 || !m[tracing.AttrAllowed].AsBool() {
		t.Errorf("AllowN attributes %v", m)
	}
	if errs := tr.calls.take(); len(errs) != 2 || errs[0] != nil || errs[1] != nil {
		t.Errorf("store calls observed %v, want 2 without error", errs)
	}
}

// A failed store call is an error on its span, with the key when Keys is
// on, and an error to the observer.
func TestObserveStoreError(t *testing.T) {
	boom := errors.New("redis: connection refused")
	tr := newTraced(t, true, func(s sluice.Store) sluice.Store { return &faultStore{Store: s, err: boom} })
	spans, err := tr.decide(t, desc("fw", "a", 1))
	if !errors.Is(err, boom) {
		t.Fatalf("Decide: %v, want %v", err, boom)
	}
	st := spans[0]
	if st.Name() != "store.AllowN" || st.Status().Code != codes.Error || st.Status().Description != boom.Error() || len(st.Events()) != 1 {
		t.Errorf("store span %s: status %v, events %v", st.Name(), st.Status(), st.Events())
	}
	if k := attrsOf(st)[tracing.AttrKey].AsString(); k == "" {
		t.Errorf("no key with Keys on: %v", attrsOf(st))
	}
	if _, ok := attrsOf(st)[tracing.AttrAllowed]; ok {
		t.Errorf("a failed call says allowed: %v", attrsOf(st))
	}
	if errs := tr.calls.take(); len(errs) != 1 || !errors.Is(errs[0], boom) {
		t.Errorf("store calls observed %v, want the one error", errs)
	}
}

// A degraded decision says so on the store call's span; a refund is a
// store.Return span.
func TestObserveDegradedAndRefund(t *testing.T) {
	tr := newTraced(t, false, func(s sluice.Store) sluice.Store { return &faultStore{Store: s, degraded: true} })
	spans, err := tr.decide(t, desc("fw", "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if !attrsOf(spans[0])[tracing.AttrDegraded].AsBool() {
		t.Errorf("degraded not traced: %v", attrsOf(spans[0]))
	}
	tr = newTraced(t, false, nil)
	r := desc("fw", "a", 1)
	r.NegativeHits = true
	spans, err = tr.decide(t, r)
	if err != nil {
		t.Fatal(err)
	}
	if spans[0].Name() != "store.Return" || spans[0].Parent().SpanID() != spans[1].SpanContext().SpanID() {
		t.Errorf("refund spans %v", names(spans))
	}
}

// Without a tracer nor an observer, the store is called as it is.
func TestObserveNothing(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	o := Observe(st, nil, nil)
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 2, Period: time.Second}
	for i, want := range []bool{true, true, false} {
		if d, err := o.AllowN(context.Background(), "k", lim, 1); err != nil || d.Allowed != want {
			t.Errorf("call %d: %+v, %v; want allowed %v", i, d, err, want)
		}
	}
}

// recorded is a tracer (keys: its Keys) whose spans rec records.
func recorded(t *testing.T, keys bool) (rec *tracetest.SpanRecorder, tr *tracing.Tracer) {
	rec = tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return rec, tracing.New(tp, keys)
}

// rateOnly is a store that is no MultiStore, Leaser, Resetter or
// Semaphore.
type rateOnly struct{ sluice.Store }

func (rateOnly) String() string { return "rate-only" }

// A call that the store does not support fails with the error that says
// so, and is not counted as a store call.
func TestObserveUnsupported(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	rec, tr := recorded(t, false)
	c := &calls{}
	o := Observe(rateOnly{st}, c, tr)
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 2, Period: time.Second}
	cl := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	_, multiErr := o.AllowMulti(ctx, []sluice.Request{{Key: "a", Limit: lim, N: 1}, {Key: "b", Limit: lim, N: 1}})
	_, _, reserveErr := o.Reserve(ctx, "k", lim, 1)
	_, acquireErr := o.Acquire(ctx, "k", cl, "h")
	_, extendErr := o.Extend(ctx, "k", cl, "h")
	for _, tt := range []struct {
		op        string
		err, want error
	}{
		{"AllowMulti", multiErr, sluice.ErrMultiUnsupported},
		{"Reserve", reserveErr, sluice.ErrReserveUnsupported},
		{"Return", o.Return(ctx, "k", lim, 1, time.Time{}), sluice.ErrReserveUnsupported},
		{"Reset", o.Reset(ctx, "k", lim), sluice.ErrResetUnsupported},
		{"Acquire", acquireErr, sluice.ErrSemaphoreUnsupported},
		{"Release", o.Release(ctx, "k", "h"), sluice.ErrSemaphoreUnsupported},
		{"Extend", extendErr, sluice.ErrSemaphoreUnsupported},
	} {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: %v, want an error wrapping %v", tt.op, tt.err, tt.want)
		}
	}
	if errs := c.take(); len(errs) != 0 {
		t.Errorf("unsupported calls counted as store calls: %v", errs)
	}
	_ = rec
	if got := o.String(); got != "rate-only" {
		t.Errorf("String() = %q, want the store's", got)
	}
}

// Every other call is observed once; a lost permit is an answer, not an
// error.
func TestObservePermitsAndReset(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	rec, tr := recorded(t, true)
	c := &calls{}
	o := Observe(st, c, tr)
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 2, Period: time.Second}
	cl := sluice.ConcurrencyLimit{Max: 1, TTL: time.Minute}
	if d, err := o.Acquire(ctx, "p", cl, "a"); err != nil || !d.Acquired {
		t.Fatalf("Acquire: %+v, %v", d, err)
	}
	if _, err := o.Extend(ctx, "p", cl, "a"); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := o.Release(ctx, "p", "a"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := o.Extend(ctx, "p", cl, "a"); !errors.Is(err, sluice.ErrPermitLost) {
		t.Fatalf("Extend of a released permit: %v, want ErrPermitLost", err)
	}
	if _, _, err := o.Reserve(ctx, "k", lim, 1); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if err := o.Reset(ctx, "k", lim); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	errs := c.take()
	if len(errs) != 6 || slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		t.Errorf("store calls observed %v, want 6 without error (a lost permit is an answer)", errs)
	}
	want := []string{"store.Acquire", "store.Extend", "store.Release", "store.Extend", "store.Reserve", "store.Reset"}
	spans := rec.Ended()
	if !slices.Equal(names(spans), want) {
		t.Fatalf("spans %v, want %v", names(spans), want)
	}
	for _, s := range spans {
		if s.Status().Code == codes.Error || attrsOf(s)[tracing.AttrKey].AsString() == "" {
			t.Errorf("%s: status %v, attributes %v; want no error, the key", s.Name(), s.Status(), attrsOf(s))
		}
	}
	if a := attrsOf(spans[3]); a[tracing.AttrAllowed].AsBool() {
		t.Errorf("the lost permit's span says acquired: %v", a)
	}
}

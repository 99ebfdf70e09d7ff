package server

import (
	"context"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/rls"
	"github.com/sluicehq/sluice/service/tracing"
)

// GET /v1/auth runs in a server span continued from the caller's
// traceparent, with the decision's attributes and the store call under it.
func TestTraceAuth(t *testing.T) {
	cfg, err := config.Parse("example.yaml", config.DefaultExample())
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	tr := tracing.New(tp, false)
	obs := metrics.Observe(st, nil, tr)
	s := New(rls.New(engine.New(obs, cfg, engine.WithTracer(tr))), obs, WithTracer(tr))

	for _, method := range []string{"GET", "HEAD"} {
		rec.Reset()
		req := httptest.NewRequest(method, "/v1/auth", nil)
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		spans := rec.Ended()
		if len(spans) < 2 {
			t.Fatalf("%s /v1/auth (%d): %d spans, want the store's and the server's", method, w.Code, len(spans))
		}
		srv := spans[len(spans)-1]
		if srv.Name() != method+" /v1/auth" || srv.Parent().SpanID().String() != "00f067aa0ba902b7" || !srv.Parent().IsRemote() {
			t.Errorf("server span %q, parent %v", srv.Name(), srv.Parent())
		}
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range srv.Attributes() {
			a[kv.Key] = kv.Value
		}
		if a[tracing.AttrDomain].AsString() != "example" || a["http.response.status_code"].AsInt64() != int64(w.Code) || a["http.route"].AsString() != "/v1/auth" {
			t.Errorf("%s /v1/auth span attributes %v", method, a)
		}
		if st := spans[0]; st.Name() != "store.AllowN" || st.Parent().SpanID() != srv.SpanContext().SpanID() {
			t.Errorf("store span %q, parent %v", st.Name(), st.Parent().SpanID())
		}
	}
}

// Package otlptest is an OTLP trace receiver for tests: a gRPC server on
// loopback implementing the collector's TraceService, and the same over
// OTLP/HTTP, which record every span they are sent. It is a normal package so that tests of any package in
// the module can import it; nothing outside tests should.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, its ids in lower-case hex.
type Span struct {
	Name                      string
	TraceID, SpanID, ParentID string
	Kind                      tracepb.Span_SpanKind
	Attrs                     map[string]any // string, bool, int64, float64 or []any
	Resource                  map[string]any
	StatusCode                tracepb.Status_StatusCode
	StatusMessage             string
	Scope                     string
}

// Receiver records the spans exported to it.
type Receiver struct {
	coltrace.UnimplementedTraceServiceServer
	// Addr is the receiver's gRPC host:port on loopback.
	Addr string
	// HTTPAddr is its OTLP/HTTP host:port (POST /v1/traces, protobuf).
	HTTPAddr string

	mu      sync.Mutex
	spans   []Span
	exports int
	changed chan struct{} // closed and replaced at each export
}

// Start starts a receiver, stopped when the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Addr: l.Addr().String(), changed: make(chan struct{})}
	gs := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(gs, r)
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.HTTPAddr = hl.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		b, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
		var in coltrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &in)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Export(req.Context(), &in)
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	})
	hs := &http.Server{Handler: mux}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })
	return r
}

// Export implements the collector's TraceService.
func (r *Receiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind(), Attrs: attrs(s.GetAttributes()),
					Resource: res, StatusCode: s.GetStatus().GetCode(), StatusMessage: s.GetStatus().GetMessage(),
					Scope: ss.GetScope().GetName(),
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.exports++
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Exports returns how many export requests arrived.
func (r *Receiver) Exports() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exports
}

// Wait waits until cond holds for the spans received, and returns them; it
// fails the test after timeout.
func (r *Receiver) Wait(t testing.TB, timeout time.Duration, cond func([]Span) bool) []Span {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		spans, changed := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if cond(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("spans received within %v: %d, not what the test waits for: %+v", timeout, len(spans), spans)
		}
	}
}

// Named returns the spans of spans named name.
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(kvs []*common.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *common.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *common.AnyValue_StringValue:
		return x.StringValue
	case *common.AnyValue_BoolValue:
		return x.BoolValue
	case *common.AnyValue_IntValue:
		return x.IntValue
	case *common.AnyValue_DoubleValue:
		return x.DoubleValue
	case *common.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	}
	return nil
}

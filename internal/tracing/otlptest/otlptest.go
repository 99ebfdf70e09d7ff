// Package otlptest is an OTLP trace receiver for tests: a gRPC server on
// loopback implementing the collector's TraceService, which records every
// span it is sent. It is a normal package so that tests of any package in
// the module can import it; nothing outside tests should.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
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
	// Addr is the receiver's host:port on loopback.
	Addr string

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

package tracing

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestBound(t *testing.T) {
	for _, tt := range []struct {
		give string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456…"},
		{"ééééé", 8, "éé…"}, // 2 bytes each: cut at a character's boundary
		{"日本語テキスト", 9, "日本…"},
	} {
		got := Bound(tt.give, tt.max)
		if got != tt.want || len(got) > tt.max || !utf8.ValidString(got) {
			t.Errorf("Bound(%q, %d) = %q, want %q", tt.give, tt.max, got, tt.want)
		}
	}
}

func TestStrings(t *testing.T) {
	var vs []string
	for range 100 {
		vs = append(vs, strings.Repeat("v", 1000))
	}
	kv := Strings("k", vs)
	got := kv.Value.AsStringSlice()
	n := 0
	for _, v := range got {
		n += len(v)
	}
	if n > MaxAttrListBytes+len(truncated) || got[len(got)-1] != truncated {
		t.Fatalf("Strings of 100 values of 1000 bytes: %d values, %d bytes, last %q; want at most %d bytes and a last %q", len(got), n, got[len(got)-1], MaxAttrListBytes, truncated)
	}
	if got := Strings("k", []string{"a", "b"}).Value.AsStringSlice(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("Strings of two short values = %q", got)
	}
}

// TestEndBoundsTheError: an error that quotes a request (a key of 1 MB)
// gives an exception event and a status of at most MaxAttrBytes.
func TestEndBoundsTheError(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	_, span := tp.Tracer("t").Start(context.Background(), "s")
	End(span, errors.New("invalid key "+strings.Repeat("k", 1<<20)))
	s := rec.Ended()[0]
	if d := s.Status().Description; len(d) > MaxAttrBytes {
		t.Errorf("status description of %d bytes, want at most %d", len(d), MaxAttrBytes)
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Fatalf("events %v, want one exception", s.Events())
	}
	for _, kv := range s.Events()[0].Attributes {
		if len(kv.Value.Emit()) > MaxAttrBytes {
			t.Errorf("exception event attribute %s of %d bytes, want at most %d", kv.Key, len(kv.Value.Emit()), MaxAttrBytes)
		}
	}
}

// TestTraceStateBound: a caller's tracestate longer than
// MaxTraceStateBytes is dropped, its traceparent kept.
func TestTraceStateBound(t *testing.T) {
	tr := New(sdktrace.NewTracerProvider(), false)
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, tt := range []struct {
		state string
		kept  bool
	}{
		{"a=1,b=2", true},
		{"a=" + strings.Repeat("x", 250) + ",b=" + strings.Repeat("y", 250), true},
		{"a=" + strings.Repeat("x", 250) + ",b=" + strings.Repeat("y", 250) + ",c=" + strings.Repeat("z", 250), false},
	} {
		h := http.Header{}
		h.Set("traceparent", parent)
		h.Set("tracestate", tt.state)
		sc := trace.SpanContextFromContext(tr.prop.Extract(context.Background(), propagation.HeaderCarrier(h)))
		if !sc.IsValid() || sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
			t.Fatalf("tracestate of %d bytes: the traceparent was not kept: %v", len(tt.state), sc)
		}
		if kept := sc.TraceState().Len() > 0; kept != tt.kept {
			t.Errorf("tracestate of %d bytes: kept %v, want %v", len(tt.state), kept, tt.kept)
		}
	}
}

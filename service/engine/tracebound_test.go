package engine

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice/service/tracing"
)

// TestTraceBoundsTheRequest: a request's strings reach its span bounded,
// however long: a domain of 1 MB and 16 descriptors of 16 entries of 1 KB
// each give at most MaxAttrBytes of domain and MaxAttrListBytes of
// entries.
func TestTraceBoundsTheRequest(t *testing.T) {
	e, tp, rec := newTraced(t, true, nil)
	long := strings.Repeat("x", 1<<10)
	var ds []Descriptor
	for range 16 {
		var es []Entry
		for range 16 {
			es = append(es, Entry{Key: long, Value: long})
		}
		ds = append(ds, Descriptor{Entries: es})
	}
	for _, domain := range []string{strings.Repeat("d", 1<<20), "t"} {
		ctx, span := tp.Tracer("test").Start(context.Background(), "server")
		if _, err := e.Decide(ctx, &Request{Domain: domain, Descriptors: ds}); err != nil {
			t.Fatal(err)
		}
		span.End()
	}
	spans := rec.Ended()
	for _, s := range spans {
		n := 0
		for _, kv := range s.Attributes() {
			switch kv.Value.Type() {
			case attribute.STRING:
				if len(kv.Value.AsString()) > tracing.MaxAttrBytes {
					t.Errorf("%s: attribute %s of %d bytes, want at most %d", s.Name(), kv.Key, len(kv.Value.AsString()), tracing.MaxAttrBytes)
				}
				n += len(kv.Value.AsString())
			case attribute.STRINGSLICE:
				m := 0
				for _, v := range kv.Value.AsStringSlice() {
					m += len(v)
				}
				if m > tracing.MaxAttrListBytes+len("…") {
					t.Errorf("%s: attribute %s of %d bytes, want at most %d", s.Name(), kv.Key, m, tracing.MaxAttrListBytes)
				}
				n += m
			}
		}
		if n > 2*tracing.MaxAttrListBytes+tracing.MaxAttrBytes+64 {
			t.Errorf("%s: %d bytes of string attributes", s.Name(), n)
		}
	}
}

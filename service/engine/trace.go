package engine

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice/service/tracing"
)

// WithTracer traces the decisions with t: their attributes on the caller's
// span (the protocol's server span). The store calls are traced by the
// store the engine decides through (service/metrics.Observe). Nil (the
// default) traces nothing and costs nothing.
func WithTracer(t *tracing.Tracer) Option { return func(e *Engine) { e.tr = t } }

// codeName is c as the protocols spell it.
func codeName(c Code) string {
	switch c {
	case OK:
		return "OK"
	case OverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// annotate adds the decision's attributes to ctx's span.
func (e *Engine) annotate(ctx context.Context, req *Request, res *Result, known bool, lists ...[]check) {
	var hits uint64
	for i := range req.Descriptors {
		if d := &req.Descriptors[i]; d.HasHits {
			hits += d.Hits
		} else {
			hits += uint64(max(req.Hits, 1))
		}
	}
	var rules []string
	degraded := false
	for _, cs := range lists {
		for k := range cs {
			c := &cs[k]
			degraded = degraded || c.d.Degraded
			if n := c.rule.Name; !contains(rules, n) {
				rules = append(rules, n)
			}
		}
	}
	// The request's strings are bounded (tracing.String, tracing.Strings):
	// a span holds them until it is exported.
	attrs := []attribute.KeyValue{
		tracing.String(tracing.AttrDomain, req.Domain),
		attribute.Int(tracing.AttrDescriptors, len(req.Descriptors)),
		attribute.Int64(tracing.AttrHits, int64(min(hits, 1<<62))),
		attribute.Bool(tracing.AttrKnown, known),
		tracing.Strings(tracing.AttrRules, rules),
		attribute.String(tracing.AttrResult, codeName(res.Code)),
		attribute.Bool(tracing.AttrDenied, res.Denied),
		attribute.Bool(tracing.AttrDegraded, degraded),
	}
	if e.tr.Keys() {
		vals := make([]string, len(req.Descriptors))
		for i, d := range req.Descriptors {
			var b strings.Builder
			for j, en := range d.Entries {
				if b.Len() > tracing.MaxAttrBytes {
					break // cut by tracing.Strings
				}
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteString(tracing.Bound(en.Key, tracing.MaxAttrBytes))
				b.WriteByte('=')
				b.WriteString(tracing.Bound(en.Value, tracing.MaxAttrBytes))
			}
			vals[i] = b.String()
		}
		attrs = append(attrs, tracing.Strings(tracing.AttrValues, vals))
	}
	tracing.Annotate(ctx, attrs...)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

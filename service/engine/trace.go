package engine

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/tracing"
)

// WithTracer traces the decisions with t: their attributes on the caller's
// span (the protocol's server span) and a child span for each store call.
// Nil (the default) traces nothing and costs nothing.
func WithTracer(t *tracing.Tracer) Option { return func(e *Engine) { e.tr = t } }

// Attribute keys of a traced decision.
const (
	AttrDomain      = "sluice.domain"
	AttrDescriptors = "sluice.descriptors"        // how many
	AttrHits        = "sluice.hits"               // the costs of the descriptors, added up
	AttrRules       = "sluice.rules"              // the names of the rules applied
	AttrResult      = "sluice.result"             // OK or OVER_LIMIT, as answered
	AttrDenied      = "sluice.denied"             // a limit denied (true in shadow mode too)
	AttrDegraded    = "sluice.degraded"           // a store decided without the shared store
	AttrKnown       = "sluice.domain_known"       // the domain and descriptors matched the configuration
	AttrValues      = "sluice.descriptor_entries" // with --tracing-keys only
	AttrKey         = "sluice.key"                // with --tracing-keys only
	AttrAlgorithm   = "sluice.algorithm"
	AttrN           = "sluice.n"
	AttrAllowed     = "sluice.allowed"
	AttrRequests    = "sluice.requests"
)

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
		tracing.String(AttrDomain, req.Domain),
		attribute.Int(AttrDescriptors, len(req.Descriptors)),
		attribute.Int64(AttrHits, int64(min(hits, 1<<62))),
		attribute.Bool(AttrKnown, known),
		tracing.Strings(AttrRules, rules),
		attribute.String(AttrResult, codeName(res.Code)),
		attribute.Bool(AttrDenied, res.Denied),
		attribute.Bool(AttrDegraded, degraded),
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
		attrs = append(attrs, tracing.Strings(AttrValues, vals))
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

// limitAttrs are the attributes of a store call on key, lim and n.
func (e *Engine) limitAttrs(key string, lim sluice.Limit, n int) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String(AttrAlgorithm, lim.Algorithm.String()), attribute.Int(AttrN, n)}
	if e.tr.Keys() {
		attrs = append(attrs, tracing.String(AttrKey, key))
	}
	return attrs
}

// allowNTraced is allowN in a child span.
func (e *Engine) allowNTraced(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	ctx, span := e.tr.Start(ctx, "store.AllowN", e.limitAttrs(key, lim, n)...)
	start := time.Now()
	d, err := e.store.AllowN(ctx, key, lim, n)
	e.obs.StoreCall(time.Since(start), err)
	if err == nil {
		span.SetAttributes(attribute.Bool(AttrAllowed, d.Allowed), attribute.Bool(AttrDegraded, d.Degraded))
	}
	tracing.End(span, err)
	return d, err
}

// startMulti starts the child span of an AllowMulti call on reqs.
func (e *Engine) startMulti(ctx context.Context, reqs []sluice.Request) (context.Context, func([]sluice.Decision, error)) {
	attrs := []attribute.KeyValue{attribute.Int(AttrRequests, len(reqs))}
	if e.tr.Keys() {
		keys := make([]string, len(reqs))
		for i, r := range reqs {
			keys[i] = r.Key
		}
		attrs = append(attrs, tracing.Strings(AttrKey, keys))
	}
	ctx, span := e.tr.Start(ctx, "store.AllowMulti", attrs...)
	return ctx, func(ds []sluice.Decision, err error) {
		if err == nil {
			allowed, degraded := true, false
			for _, d := range ds {
				allowed, degraded = allowed && d.Allowed, degraded || d.Degraded
			}
			span.SetAttributes(attribute.Bool(AttrAllowed, allowed), attribute.Bool(AttrDegraded, degraded))
		}
		tracing.End(span, err)
	}
}

// returnTraced is the leaser's Return in a child span.
func (e *Engine) returnTraced(ctx context.Context, key string, lim sluice.Limit, n int) error {
	ctx, span := e.tr.Start(ctx, "store.Return", e.limitAttrs(key, lim, n)...)
	err := e.leaser.Return(ctx, key, lim, n, time.Time{})
	tracing.End(span, err)
	return err
}

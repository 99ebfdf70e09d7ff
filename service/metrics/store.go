package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/tracing"
)

// StoreObserver receives every store call that an Observed store makes.
// StoreCall is called on the calling goroutine and must be fast and safe
// for concurrent use.
type StoreObserver interface {
	// StoreCall reports the duration of one store call and its error: nil
	// for a decision, a refusal or a lost permit, which are answers.
	StoreCall(d time.Duration, err error)
}

// Observed is the service's store as the service calls it: every call
// goes through it once, timed for a StoreObserver and, with a tracer, in
// a child span of the caller's. The engine, the HTTP API and the admin API
// all call their store through it, so no call site times or traces a store
// call itself. It is a sluice.FullStore over the store it observes
// (sluice.Lift): a call that store does not support returns its error
// wrapping the capability's sluice.Err...Unsupported, which is not counted
// as a failed store call.
type Observed struct {
	s   sluice.Store     // the store observed, for its name
	f   sluice.FullStore // s, lifted
	obs StoreObserver    // nil: no metrics
	tr  *tracing.Tracer  // nil: no spans
}

var _ sluice.FullStore = (*Observed)(nil)

// Observe returns s observed by obs (nil: no metrics) and traced by tr
// (nil: no spans). Spans carry the limit's algorithm and the cost (with
// the tracer's Keys, the key), and once the store answered, whether it
// allowed and whether it decided without the shared store (degraded).
func Observe(s sluice.Store, obs StoreObserver, tr *tracing.Tracer) *Observed {
	return &Observed{s: s, f: sluice.Lift(s), obs: obs, tr: tr}
}

// String names the store observed: its String, or its type.
func (o *Observed) String() string {
	if sr, ok := o.s.(fmt.Stringer); ok {
		return sr.String()
	}
	return fmt.Sprintf("%T", o.s)
}

// end times the call begun at start and ends its span (nil when not
// traced) with err, nil for an answer. A capability the store lacks is
// not a store call: it is not timed.
func (o *Observed) end(start time.Time, span trace.Span, err error) {
	if o.obs != nil && !unsupported(err) {
		o.obs.StoreCall(time.Since(start), err)
	}
	if span != nil {
		tracing.End(span, err)
	}
}

// decided ends a call that decided: its span, when it answered, says
// whether it allowed and whether the shared store took no part.
func (o *Observed) decided(start time.Time, span trace.Span, err error, allowed, degraded bool) {
	if span != nil && err == nil {
		span.SetAttributes(attribute.Bool(tracing.AttrAllowed, allowed), attribute.Bool(tracing.AttrDegraded, degraded))
	}
	o.end(start, span, err)
}

// limitAttrs are a span's attributes of a call on key, lim and n.
func (o *Observed) limitAttrs(key string, lim sluice.Limit, n int) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String(tracing.AttrAlgorithm, lim.Algorithm.String()), attribute.Int(tracing.AttrN, n)}
	if o.tr.Keys() {
		attrs = append(attrs, tracing.String(tracing.AttrKey, key))
	}
	return attrs
}

// keyAttrs are a span's attributes of a call on key alone.
func (o *Observed) keyAttrs(key string) []attribute.KeyValue {
	if o.tr.Keys() {
		return []attribute.KeyValue{tracing.String(tracing.AttrKey, key)}
	}
	return nil
}

// unsupported reports whether err is the answer of a store that lacks
// the capability called.
func unsupported(err error) bool {
	return err != nil && (errors.Is(err, sluice.ErrMultiUnsupported) || errors.Is(err, sluice.ErrReserveUnsupported) ||
		errors.Is(err, sluice.ErrResetUnsupported) || errors.Is(err, sluice.ErrSemaphoreUnsupported))
}

// AllowN implements sluice.Store.
func (o *Observed) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	var span trace.Span
	if o.tr != nil {
		ctx, span = o.tr.Start(ctx, "store.AllowN", o.limitAttrs(key, lim, n)...)
	}
	start := time.Now()
	d, err := o.s.AllowN(ctx, key, lim, n)
	o.decided(start, span, err, d.Allowed, d.Degraded)
	return d, err
}

// AllowMulti implements sluice.MultiStore.
func (o *Observed) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if len(reqs) == 0 {
		return o.f.AllowMulti(ctx, reqs) // asks whether the store has AllowMulti; no store call
	}
	var span trace.Span
	if o.tr != nil {
		attrs := []attribute.KeyValue{attribute.Int(tracing.AttrRequests, len(reqs))}
		if o.tr.Keys() {
			keys := make([]string, len(reqs))
			for i, r := range reqs {
				keys[i] = r.Key
			}
			attrs = append(attrs, tracing.Strings(tracing.AttrKey, keys))
		}
		ctx, span = o.tr.Start(ctx, "store.AllowMulti", attrs...)
	}
	start := time.Now()
	ds, err := o.f.AllowMulti(ctx, reqs)
	allowed, degraded := true, false
	for _, d := range ds {
		allowed, degraded = allowed && d.Allowed, degraded || d.Degraded
	}
	o.decided(start, span, err, allowed, degraded)
	return ds, err
}

// Reserve implements sluice.Reserver.
func (o *Observed) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	var span trace.Span
	if o.tr != nil {
		ctx, span = o.tr.Start(ctx, "store.Reserve", o.limitAttrs(key, lim, n)...)
	}
	start := time.Now()
	d, at, err := o.f.Reserve(ctx, key, lim, n)
	o.decided(start, span, err, d.Allowed, d.Degraded)
	return d, at, err
}

// Return implements sluice.Reserver.
func (o *Observed) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	var span trace.Span
	if o.tr != nil {
		ctx, span = o.tr.Start(ctx, "store.Return", o.limitAttrs(key, lim, n)...)
	}
	start := time.Now()
	err := o.f.Return(ctx, key, lim, n, at)
	o.end(start, span, err)
	return err
}

// Reset implements sluice.Resetter.
func (o *Observed) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	var span trace.Span
	if o.tr != nil {
		ctx, span = o.tr.Start(ctx, "store.Reset", o.limitAttrs(key, lim, 0)...)
	}
	start := time.Now()
	err := o.f.Reset(ctx, key, lim)
	o.end(start, span, err)
	return err
}

// Acquire implements sluice.Semaphore.
func (o *Observed) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	return o.permit(ctx, "store.Acquire", key, func(ctx context.Context) (sluice.PermitDecision, error) {
		return o.f.Acquire(ctx, key, lim, holder)
	})
}

// Release implements sluice.Semaphore.
func (o *Observed) Release(ctx context.Context, key, holder string) error {
	var span trace.Span
	if o.tr != nil {
		ctx, span = o.tr.Start(ctx, "store.Release", o.keyAttrs(key)...)
	}
	start := time.Now()
	err := o.f.Release(ctx, key, holder)
	o.end(start, span, err)
	return err
}

// Extend implements sluice.Semaphore.
func (o *Observed) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	return o.permit(ctx, "store.Extend", key, func(ctx context.Context) (sluice.PermitDecision, error) {
		return o.f.Extend(ctx, key, lim, holder)
	})
}

// permit observes call, the permit's call named name on key. A lost
// permit is an answer (not acquired), not a failed call.
func (o *Observed) permit(ctx context.Context, name, key string, call func(context.Context) (sluice.PermitDecision, error)) (sluice.PermitDecision, error) {
	var span trace.Span
	if o.tr != nil {
		ctx, span = o.tr.Start(ctx, name, o.keyAttrs(key)...)
	}
	start := time.Now()
	d, err := call(ctx)
	answer := err
	if errors.Is(err, sluice.ErrPermitLost) {
		answer = nil
	}
	o.decided(start, span, answer, d.Acquired, d.Degraded)
	return d, err
}

// Freed implements sluice.PermitWaker: the store's, or nil.
func (o *Observed) Freed(key string) <-chan struct{} { return o.f.Freed(key) }

// Close implements io.Closer: it closes nothing, as the store observed
// is its caller's to close.
func (o *Observed) Close() error { return nil }

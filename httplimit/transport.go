package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
)

// DefaultMaxBackoff is the longest upstream back-off a Transport records
// when MaxBackoff is 0: a Retry-After beyond it is clamped to it.
const DefaultMaxBackoff = time.Hour

// maxBackoffCeiling bounds MaxBackoff so that the back-off limit stays
// within the exact arithmetic of every store.
const maxBackoffCeiling = 30 * 24 * time.Hour

// BackoffKeyPrefix prefixes the store key under which a Transport records
// an upstream's back-off: "httplimit-backoff:" + the quota key.
const BackoffKeyPrefix = "httplimit-backoff:"

// Transport is an http.RoundTripper that keeps every replica sharing a
// store inside an upstream's quota, and pauses them all when the upstream
// says so.
//
// Before each request it waits, bounded by the request's context and
// MaxWait, first for any back-off recorded for the upstream, then for one
// unit of Limit under the request's key. When the wait cannot fit, it
// returns at once a *LimitedError carrying the Decision (no sleeping to
// fail). On an upstream 429 or 503 with a Retry-After (delay-seconds or an
// HTTP-date, clamped to MaxBackoff), it records the back-off in the shared
// store, so that every Transport on that store waits until then, and
// returns the response (or, with Retries, waits and sends the request
// again when that is safe).
//
// The back-off is recorded with the sluice.Store contract alone, so it
// works on every store: the key BackoffKeyPrefix+key holds a GCRA state
// with an emission interval of 1 ms (Rate 1 per Period 1ms), so that its
// theoretical arrival time is the end of the back-off. Recording a back-off
// of m ms admits the units that bring the arrival time to now+m ms, with
// Burst m: the store admits them only if the arrival time stays at or
// below now+m ms, so that concurrent recorders never stack their
// back-offs, and a longer back-off already recorded is kept. Checking is a
// peek (n = 0), which counts nothing; its ResetAfter is the back-off left.
// The state expires with the back-off (memstore drops it, Redis's TTL
// ends), and a fresh key costs nothing to peek.
//
// A store error ends the wait: RoundTrip returns it wrapped, without
// sending the request. Under a failover.Store whose limit fails with
// sluice.FailError, that is an error wrapping sluice.ErrNoDecision while
// the store is down; a caller that would rather send anyway checks
// errors.Is(err, sluice.ErrNoDecision) and sends through Base itself.
//
// A request that need not wait costs two store calls (the back-off peek
// and the quota unit), on Redis two round trips.
//
// Following the RoundTripper contract, the request is never modified
// (a retry sends a clone) and its body is closed on every path.
//
// A field with an invalid value (a nil Limiter, a negative duration or
// Retries, a MaxBackoff over 30 days) makes RoundTrip, Backoff and
// RecordBackoff return an error naming it, without sending or recording
// anything.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Limiter decides through the store shared by the fleet. Required.
	Limiter *sluice.Limiter
	// Limit is the upstream's quota, shared by every Transport using the
	// same store and key. The zero Limit waits for recorded back-offs only.
	Limit sluice.Limit
	// Key derives the quota key of a request; nil means the request's host
	// (URL.Host, such as "api.example.com" or "127.0.0.1:8080").
	Key KeyFunc
	// MaxWait bounds the total time a RoundTrip waits for quota and
	// back-offs, retries included; 0 means only the context bounds it.
	// Not negative.
	MaxWait time.Duration
	// MaxBackoff clamps the Retry-After values recorded: an upstream cannot
	// stop the fleet longer than this by a typo or a malicious header.
	// 0 means DefaultMaxBackoff; at most 30 days.
	MaxBackoff time.Duration
	// DefaultBackoff is recorded for a 429 whose Retry-After is missing or
	// malformed; 0, the default, records nothing then. A 503 without a
	// usable Retry-After records nothing. Not negative.
	DefaultBackoff time.Duration
	// Retries is how many times a request is sent again after a recorded
	// back-off, when its method is idempotent (GET, HEAD, OPTIONS, TRACE,
	// PUT, DELETE, or any method with an Idempotency-Key header) and its body
	// can be replayed (none, or GetBody set), and the back-off fits in the
	// wait bounds. 0, the default, returns the 429 or 503 to the caller.
	// Not negative.
	Retries int
	// Now is the clock for HTTP-date Retry-After values; nil means
	// time.Now.
	Now func() time.Time
	// OnBackoff, when set, is called after a back-off is recorded, with the
	// key and the clamped duration, and with the store error if any.
	OnBackoff func(key string, d time.Duration, err error)
}

var _ http.RoundTripper = (*Transport)(nil)

// LimitedError is returned by Transport.RoundTrip when the request could
// not be sent within the wait bounds. Decision is the denying decision: its
// RetryAfter is the wait that did not fit.
type LimitedError struct {
	Key      string
	Decision sluice.Decision
	// Backoff is true when an upstream's recorded back-off blocked the
	// request, false when the quota did.
	Backoff bool
	// Err is the cause: sluice.ErrWouldExceedDeadline, or the wait
	// context's error when MaxWait ran out while sleeping.
	Err error
}

// Error implements error.
func (e *LimitedError) Error() string {
	what := "quota"
	if e.Backoff {
		what = "upstream back-off"
	}
	return fmt.Sprintf("httplimit: %q limited by %s, retry after %v: %v", e.Key, what, e.Decision.RetryAfter, e.Err)
}

// Unwrap returns Err.
func (e *LimitedError) Unwrap() error { return e.Err }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.check(); err != nil {
		closeBody(req)
		return nil, err
	}
	key, err := t.key(req)
	if err != nil {
		closeBody(req)
		return nil, fmt.Errorf("httplimit: Transport key: %w", err)
	}
	ctx := req.Context()
	var deadline time.Time
	if t.MaxWait > 0 {
		deadline = time.Now().Add(t.MaxWait)
	}
	attempt := req
	for try := 0; ; try++ {
		if err := t.await(ctx, key, deadline); err != nil {
			closeBody(attempt)
			return nil, err
		}
		resp, err := t.base().RoundTrip(attempt)
		if err != nil {
			return nil, err // the base closed the body
		}
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			return resp, nil
		}
		d, ok := t.backoffOf(resp)
		if !ok {
			return resp, nil
		}
		rerr := t.RecordBackoff(ctx, key, d)
		if t.OnBackoff != nil {
			t.OnBackoff(key, d, rerr)
		}
		if try >= t.Retries || rerr != nil || !canRetry(req) || !fits(ctx, deadline, d) {
			return resp, nil
		}
		next, err := rewind(req)
		if err != nil {
			return resp, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) //nolint:errcheck // draining for reuse only
		resp.Body.Close()
		attempt = next
	}
}

// check reports the first field of t with an invalid value.
func (t *Transport) check() error {
	var field string
	switch {
	case t.Limiter == nil:
		return errors.New("httplimit: Transport.Limiter is nil")
	case t.MaxWait < 0:
		field = fmt.Sprintf("MaxWait %v is negative", t.MaxWait)
	case t.MaxBackoff < 0 || t.MaxBackoff > maxBackoffCeiling:
		field = fmt.Sprintf("MaxBackoff %v is not within [0, %v]", t.MaxBackoff, maxBackoffCeiling)
	case t.DefaultBackoff < 0:
		field = fmt.Sprintf("DefaultBackoff %v is negative", t.DefaultBackoff)
	case t.Retries < 0:
		field = fmt.Sprintf("Retries %d is negative", t.Retries)
	default:
		return nil
	}
	return errors.New("httplimit: Transport." + field)
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) key(req *http.Request) (string, error) {
	return outboundKey("Transport", t.Key, req)
}

// outboundKey derives an outbound request's key: fn's, or the request's
// host when fn is nil. owner names the type in the error of an empty key.
func outboundKey(owner string, fn KeyFunc, req *http.Request) (string, error) {
	if fn != nil {
		k, err := fn(req)
		if err == nil && k == "" {
			err = fmt.Errorf("%w: %s.Key returned an empty key", ErrNoKey, owner)
		}
		return k, err
	}
	if req.URL != nil && req.URL.Host != "" {
		return req.URL.Host, nil
	}
	if req.Host != "" {
		return req.Host, nil
	}
	return "", fmt.Errorf("%w: request has no host", ErrNoKey)
}

func (t *Transport) maxBackoff() time.Duration {
	if t.MaxBackoff == 0 {
		return DefaultMaxBackoff
	}
	return t.MaxBackoff
}

// backoffLimit is the limit of the back-off state: one unit per ms, at
// most burst ms ahead of now.
func backoffLimit(burst int) sluice.Limit {
	return sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Millisecond, Burst: burst}
}

func msCeil(d time.Duration) int { return int((d + time.Millisecond - 1) / time.Millisecond) }

// Backoff reports the back-off recorded for key that is still to run (0
// when none), as every Transport sharing t's store sees it.
func (t *Transport) Backoff(ctx context.Context, key string) (time.Duration, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	d, err := t.Limiter.AllowN(ctx, BackoffKeyPrefix+key, backoffLimit(msCeil(t.maxBackoff())), 0)
	if err != nil {
		return 0, fmt.Errorf("httplimit: reading back-off of %q: %w", key, err)
	}
	return d.ResetAfter, nil
}

// await waits for the back-off of key, then for one unit of quota, within
// ctx and deadline. When the quota made it sleep, it checks the back-off
// again: if another replica heard a 429 meanwhile, the unit it holds would
// go out when the back-off ends, on top of the quota refilled by then, so
// it gives the unit up (spent, which errs on the side of the upstream) and
// waits for the back-off and a fresh unit.
func (t *Transport) await(ctx context.Context, key string, deadline time.Time) error {
	wctx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	for {
		if err := t.awaitBackoff(ctx, wctx, key); err != nil {
			return err
		}
		if t.Limit == (sluice.Limit{}) {
			return nil
		}
		d, err := t.Limiter.AllowN(wctx, key, t.Limit, 1)
		if err == nil && d.Allowed {
			return nil // the common case: two store calls in all
		}
		if err == nil {
			d, err = t.Limiter.Wait(wctx, key, t.Limit, 1)
		}
		if err != nil {
			return t.waitErr(ctx, wctx, key, d, false, err)
		}
		left, err := t.Backoff(wctx, key)
		if err != nil {
			return t.waitErr(ctx, wctx, key, sluice.Decision{}, false, err)
		}
		if left <= 0 {
			return nil
		}
	}
}

// awaitBackoff sleeps until no back-off is recorded for key.
func (t *Transport) awaitBackoff(ctx, wctx context.Context, key string) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		left, err := t.Backoff(wctx, key)
		if err != nil {
			return t.waitErr(ctx, wctx, key, sluice.Decision{}, false, err)
		}
		if left <= 0 {
			return nil
		}
		dec := sluice.Decision{Limit: backoffLimit(msCeil(t.maxBackoff())), RetryAfter: left, ResetAfter: left}
		if dl, ok := wctx.Deadline(); ok && time.Until(dl) <= left {
			return &LimitedError{Key: key, Decision: dec, Backoff: true,
				Err: fmt.Errorf("%w: back-off of %v, deadline in %v", sluice.ErrWouldExceedDeadline, left, max(time.Until(dl), 0))}
		}
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-wctx.Done():
			return t.waitErr(ctx, wctx, key, dec, true, wctx.Err())
		case <-timer.C:
		}
	}
}

// waitErr classifies a wait error: the caller's context error as is, a
// wait that cannot fit as *LimitedError, anything else wrapped.
func (t *Transport) waitErr(ctx, wctx context.Context, key string, d sluice.Decision, backoff bool, err error) error {
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	case errors.Is(err, sluice.ErrWouldExceedDeadline),
		wctx.Err() != nil && errors.Is(err, wctx.Err()):
		return &LimitedError{Key: key, Decision: d, Backoff: backoff, Err: err}
	}
	return fmt.Errorf("httplimit: waiting for %q: %w", key, err)
}

// backoffOf returns the back-off a 429 or 503 asks for, clamped.
func (t *Transport) backoffOf(resp *http.Response) (time.Duration, bool) {
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	d, err := parseRetryAfter(resp.Header.Get(HeaderRetryAfter), now())
	if err != nil {
		if resp.StatusCode != http.StatusTooManyRequests || t.DefaultBackoff <= 0 {
			return 0, false
		}
		d = t.DefaultBackoff
	}
	d = min(d, t.maxBackoff())
	return d, d > 0
}

// RecordBackoff makes every Transport sharing t's store wait until at
// least now+d (rounded up to the millisecond, clamped to MaxBackoff) before
// sending to key: RoundTrip calls it on an upstream's 429 or 503, and
// callers may call it when they learn of a back-off by other means. A
// longer back-off already recorded is kept, and concurrent calls never
// stack (see Transport). The call is not cancelled with ctx: the fleet must
// hear of the back-off even when the caller has given up.
func (t *Transport) RecordBackoff(ctx context.Context, key string, d time.Duration) error {
	if err := t.check(); err != nil {
		return err
	}
	d = min(d, t.maxBackoff())
	if d <= 0 {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	m := msCeil(d)
	lim := backoffLimit(m)
	n := m
	for range 4 {
		dec, err := t.Limiter.AllowN(ctx, BackoffKeyPrefix+key, lim, n)
		if err != nil {
			return fmt.Errorf("httplimit: recording back-off of %v for %q: %w", d, key, err)
		}
		if dec.Allowed {
			return nil
		}
		// dec.ResetAfter is the back-off already recorded (at most m ms).
		n = m - msCeil(dec.ResetAfter)
		if n <= 0 {
			return nil
		}
	}
	return nil // others kept extending it: it is at least nearly d
}

// fits reports whether a wait of d ends before both bounds.
func fits(ctx context.Context, deadline time.Time, d time.Duration) bool {
	end := time.Now().Add(d)
	if !deadline.IsZero() && !end.Before(deadline) {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && !end.Before(dl) {
		return false
	}
	return ctx.Err() == nil
}

func canRetry(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		if _, ok := req.Header["Idempotency-Key"]; !ok {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// rewind returns a clone of req with a fresh body.
func rewind(req *http.Request) (*http.Request, error) {
	next := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		b, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = b
	}
	return next, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

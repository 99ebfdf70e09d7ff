package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// InFlightKeyPrefix prefixes the store key of a ConcurrencyTransport's
// permits: "httplimit-inflight:" + the key.
const InFlightKeyPrefix = "httplimit-inflight:"

// DefaultWaitPoll is how often a waiting ConcurrencyTransport asks the
// store again when WaitPoll is 0 (sooner when the denial's RetryAfter is
// sooner, or when a permit of the same Transport is released).
const DefaultWaitPoll = 50 * time.Millisecond

// ConcurrencyTransport is an http.RoundTripper that keeps every replica
// sharing a store within Limit.Max calls in flight to an upstream at once:
// a database with a connection budget, a model that streams for a minute.
//
// It acquires a permit before each round trip and releases it when the
// response's body is closed or read to its end (io.EOF), not when
// RoundTrip returns, since the body is still streaming then; on a
// round-trip error it releases at once. A call that takes longer than a
// TTL keeps its permit: it is extended at half of each TTL until released.
// A permit whose process died frees when its TTL ends. Always close
// response bodies: an unclosed body holds its permit until it is garbage,
// and the store frees it when its TTL ends.
//
// When no permit is free it waits, polling the store at WaitPoll (or at
// the denial's RetryAfter when sooner; a release through the same
// Transport wakes it at once, and so does any release on a store that is
// a sluice.PermitWaker, as memstore is), bounded by the request's context
// and MaxWait; with FailFast it returns at once. A call that could not get a
// permit returns a *ConcurrencyLimitedError.
//
// A field with an invalid value (a nil Semaphore, an invalid Limit, a
// negative duration, a ReleaseTimeout over a minute) makes RoundTrip
// return an error naming it, without sending anything. Following the
// RoundTripper contract, the request is never modified and its body is
// closed on every path.
type ConcurrencyTransport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Semaphore holds the permits, shared by the fleet. Required.
	Semaphore sluice.Semaphore
	// Limit is how many calls may be in flight at once, and the TTL of
	// each permit.
	Limit sluice.ConcurrencyLimit
	// Key derives the key of a request; nil means the request's host.
	// The store key is InFlightKeyPrefix + key.
	Key KeyFunc
	// FailFast returns at once when no permit is free, instead of
	// waiting.
	FailFast bool
	// MaxWait bounds the wait for a permit; 0 means only the request's
	// context bounds it. Not negative.
	MaxWait time.Duration
	// WaitPoll is the longest pause between two acquires while waiting;
	// 0 means DefaultWaitPoll. Not negative.
	WaitPoll time.Duration
	// ReleaseTimeout bounds each release and extension; 0 means
	// DefaultReleaseTimeout. At most a minute.
	ReleaseTimeout time.Duration
	// Logger logs failed releases and extensions; nil discards.
	Logger *slog.Logger

	mu    sync.Mutex
	freed chan struct{} // closed and replaced on each release
}

var _ http.RoundTripper = (*ConcurrencyTransport)(nil)

// ConcurrencyLimitedError is returned by ConcurrencyTransport.RoundTrip
// when no permit could be acquired within the wait bounds (or at once,
// with FailFast). Decision is the last denial.
type ConcurrencyLimitedError struct {
	Key      string
	Decision sluice.PermitDecision
	// Err is the cause: the wait context's error, or nil with FailFast.
	Err error
}

// Error implements error.
func (e *ConcurrencyLimitedError) Error() string {
	s := fmt.Sprintf("httplimit: %q has %d of %d calls in flight, retry after %v", e.Key, e.Decision.Held, e.Decision.Limit.Max, e.Decision.RetryAfter)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns Err.
func (e *ConcurrencyLimitedError) Unwrap() error { return e.Err }

func (t *ConcurrencyTransport) check() error {
	bad := func(field, why string) error {
		return fmt.Errorf("httplimit: ConcurrencyTransport.%s: %s", field, why)
	}
	switch {
	case t.Semaphore == nil:
		return bad("Semaphore", "nil")
	case t.MaxWait < 0:
		return bad("MaxWait", fmt.Sprintf("%v is negative", t.MaxWait))
	case t.WaitPoll < 0:
		return bad("WaitPoll", fmt.Sprintf("%v is negative", t.WaitPoll))
	case t.ReleaseTimeout < 0 || t.ReleaseTimeout > maxReleaseTimeout:
		return bad("ReleaseTimeout", fmt.Sprintf("%v: want within [0, %v]", t.ReleaseTimeout, maxReleaseTimeout))
	}
	if err := t.Limit.Validate(); err != nil {
		return fmt.Errorf("httplimit: ConcurrencyTransport.Limit: %w", err)
	}
	return nil
}

func (t *ConcurrencyTransport) key(req *http.Request) (string, error) {
	return outboundKey("ConcurrencyTransport", t.Key, req)
}

func (t *ConcurrencyTransport) logger() *slog.Logger {
	if t.Logger != nil {
		return t.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (t *ConcurrencyTransport) releaseTimeout() time.Duration {
	if t.ReleaseTimeout > 0 {
		return t.ReleaseTimeout
	}
	return DefaultReleaseTimeout
}

// freedCh returns the channel closed at the next release.
func (t *ConcurrencyTransport) freedCh() chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freed == nil {
		t.freed = make(chan struct{})
	}
	return t.freed
}

func (t *ConcurrencyTransport) wake() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freed != nil {
		close(t.freed)
		t.freed = nil
	}
}

// RoundTrip implements http.RoundTripper.
func (t *ConcurrencyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.check(); err != nil {
		closeBody(req)
		return nil, err
	}
	key, err := t.key(req)
	if err != nil {
		closeBody(req)
		return nil, fmt.Errorf("httplimit: ConcurrencyTransport key: %w", err)
	}
	skey := storeKey(InFlightKeyPrefix[:len(InFlightKeyPrefix)-1], key)
	holder := sluice.NewHolder()
	d, err := t.acquire(req.Context(), key, skey, holder)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	log := t.logger()
	p := startPermit(req.Context(), t.Semaphore, skey, t.Limit, holder, d, t.releaseTimeout(), nil, log)
	release := func() {
		p.release(req.Context())
		t.wake()
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		release()
		return nil, err
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		release()
		return resp, nil
	}
	rb := &releaseBody{rc: resp.Body, release: release}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &releaseRWBody{releaseBody: rb, w: rwc}
	} else {
		resp.Body = rb
	}
	return resp, nil
}

// acquire takes a permit, waiting for one unless FailFast.
func (t *ConcurrencyTransport) acquire(ctx context.Context, key, skey, holder string) (sluice.PermitDecision, error) {
	wctx := ctx
	if t.MaxWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, t.MaxWait)
		defer cancel()
	}
	poll := t.WaitPoll
	if poll == 0 {
		poll = DefaultWaitPoll
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	waker, _ := t.Semaphore.(sluice.PermitWaker)
	for {
		freed := t.freedCh()
		var storeFreed <-chan struct{}
		if waker != nil {
			storeFreed = waker.Freed(skey)
		}
		d, err := t.Semaphore.Acquire(ctx, skey, t.Limit, holder)
		if err != nil {
			// A lost reply may have taken the permit: give it back.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.releaseTimeout())
			t.Semaphore.Release(rctx, skey, holder) //nolint:errcheck // best effort; the lease frees it otherwise
			cancel()
			return d, fmt.Errorf("httplimit: ConcurrencyTransport acquire %q: %w", key, err)
		}
		if d.Acquired {
			return d, nil
		}
		if d.Limit == (sluice.ConcurrencyLimit{}) {
			d.Limit = t.Limit
		}
		if t.FailFast {
			return d, &ConcurrencyLimitedError{Key: key, Decision: d}
		}
		wait := poll
		if d.RetryAfter > 0 {
			wait = min(wait, d.RetryAfter)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-wctx.Done():
			return d, &ConcurrencyLimitedError{Key: key, Decision: d, Err: wctx.Err()}
		case <-freed:
		case <-storeFreed:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// releaseBody releases the permit when the body is closed or read to its
// end.
type releaseBody struct {
	rc      io.ReadCloser
	release func()
	once    sync.Once
}

func (b *releaseBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.release)
	}
	return n, err
}

func (b *releaseBody) Close() error {
	err := b.rc.Close()
	b.once.Do(b.release)
	return err
}

// releaseRWBody keeps the io.Writer of a 101 Switching Protocols body.
type releaseRWBody struct {
	*releaseBody
	w io.Writer
}

func (b *releaseRWBody) Write(p []byte) (int, error) { return b.w.Write(p) }

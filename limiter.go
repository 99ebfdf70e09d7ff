package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Limiter is the caller's front to a Store: Allow, AllowN, Wait and
// AllowMulti. It is safe for concurrent use.
type Limiter struct {
	store     Store
	full      FullStore // store, lifted: every capability's method
	maxJitter time.Duration
	closed    atomic.Bool
}

// Option configures a Limiter.
type Option func(*Limiter)

// DefaultMaxJitter is the largest delay Wait adds to a RetryAfter, so that
// many waiters told the same RetryAfter do not retry in the same instant.
// The jitter is also at most a tenth of the RetryAfter.
const DefaultMaxJitter = 5 * time.Millisecond

// MinWaitRetry is the shortest sleep of Wait between two attempts, used
// when a store denies with a RetryAfter of 0 (which exact stores never do).
const MinWaitRetry = time.Millisecond

// WithMaxJitter sets the largest delay Wait adds to each RetryAfter
// (default DefaultMaxJitter); 0 or less makes Wait sleep exactly
// RetryAfter.
func WithMaxJitter(d time.Duration) Option {
	return func(l *Limiter) { l.maxJitter = max(d, 0) }
}

// errNilStore is returned by every call of a Limiter built on a nil Store.
var errNilStore = errors.New("sluice: New: Store is nil")

// New returns a Limiter deciding through s. A Limiter on a nil s returns
// an error from every call.
func New(s Store, opts ...Option) *Limiter {
	l := &Limiter{store: s, full: Lift(s), maxJitter: DefaultMaxJitter}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Store returns the store the Limiter decides through.
func (l *Limiter) Store() Store { return l.store }

// Allow is AllowN(ctx, key, lim, 1).
func (l *Limiter) Allow(ctx context.Context, key string, lim Limit) (Decision, error) {
	return l.AllowN(ctx, key, lim, 1)
}

// AllowN decides whether n events for key may happen now under lim, and
// counts them when they may. A denial is a Decision with Allowed false.
func (l *Limiter) AllowN(ctx context.Context, key string, lim Limit, n int) (Decision, error) {
	if l.closed.Load() {
		return Decision{}, ErrClosed
	}
	if l.store == nil {
		return Decision{}, errNilStore
	}
	return l.store.AllowN(ctx, key, lim, n)
}

// AllowMulti decides several requests all-or-nothing: either all are
// admitted and counted, or none is counted. When the store cannot (it
// does not implement MultiStore, or reports it unsupported), the error
// wraps ErrMultiUnsupported.
func (l *Limiter) AllowMulti(ctx context.Context, reqs []Request) ([]Decision, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if l.store == nil {
		return nil, errNilStore
	}
	return l.full.AllowMulti(ctx, reqs)
}

// Wait blocks until n events for key are admitted under lim, sleeping
// exactly the RetryAfter each denial reports (plus a small jitter) and
// retrying. It returns at once, with an error wrapping
// ErrWouldExceedDeadline and the denying Decision, when the context's
// deadline comes before the request could be admitted; and with the
// context's error when it is cancelled while sleeping.
//
// A limit that counts every hit (CountAll) would charge every attempt: Wait
// refuses it with a *LimitError on "Counting".
func (l *Limiter) Wait(ctx context.Context, key string, lim Limit, n int) (Decision, error) {
	if lim.Counting == CountAll {
		return Decision{}, &LimitError{Field: "Counting", Reason: "Wait retries until admitted, and a limit that counts every hit would charge every attempt; use AllowN"}
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	var last Decision
	for {
		if err := ctx.Err(); err != nil {
			return last, err
		}
		d, err := l.AllowN(ctx, key, lim, n)
		if err != nil || d.Allowed {
			return d, err
		}
		last = d
		// A store that denies without a wait would make Wait spin: poll no
		// faster than MinWaitRetry then.
		retry := max(d.RetryAfter, MinWaitRetry)
		sleep := retry + l.jitter(retry)
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left <= retry {
				return d, fmt.Errorf("%w: %q needs %v, deadline in %v", ErrWouldExceedDeadline, key, d.RetryAfter, max(left, 0))
			}
			if sleep >= left {
				sleep = retry // no jitter past the deadline
			}
		}
		if t == nil {
			t = time.NewTimer(sleep)
		} else {
			t.Reset(sleep)
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-t.C:
		}
	}
}

func (l *Limiter) jitter(retry time.Duration) time.Duration {
	j := min(l.maxJitter, retry/10)
	if j <= 0 {
		return 0
	}
	return rand.N(j + 1)
}

// Close marks the Limiter closed (later calls return ErrClosed) and closes
// the store (FullStore's Close; a Store that is not one, when it
// implements io.Closer).
func (l *Limiter) Close() error {
	if l.closed.Swap(true) || l.full == nil {
		return nil
	}
	return l.full.Close()
}

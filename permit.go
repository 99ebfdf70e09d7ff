package sluice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrSemaphoreUnsupported is returned by the Semaphore methods of a store
// without concurrency limits (Unsupported's, a lifted store that is not a
// Semaphore, a wrapper over one), and so by Limiter.Acquire and
// Limiter.AcquireWait.
var ErrSemaphoreUnsupported = errors.New("sluice: store does not support concurrency limits (Semaphore)")

// PermitWaker is implemented by a Semaphore that can tell a waiter when a
// permit of a key may have freed, so that Limiter.AcquireWait is woken
// rather than sleeping until the earliest permit's TTL ends. It is part of
// FullStore. memstore can tell; a store shared across processes (Redis)
// cannot, and its waiters sleep until the earliest TTL ends, the latest a
// slot can free.
type PermitWaker interface {
	// Freed returns a channel closed when a permit of key is released or
	// its TTL ends, or already closed when none is held; or nil when this
	// store cannot tell (Unsupported's, a wrapper whose store cannot): the
	// waiter then sleeps until the earliest TTL ends.
	// A waiter calls
	// Freed before each Acquire it retries, so that a release between the
	// two is not missed; the wake is a hint, not a reservation: another
	// waiter may take the slot first.
	Freed(key string) <-chan struct{}
}

// Permit is a permit of a concurrency limit taken by Limiter.Acquire or
// Limiter.AcquireWait: the caller holds one of the key's Max slots until
// it calls Release, or until its TTL ends when it neither releases nor
// extends. It is safe for concurrent use.
type Permit struct {
	l      *Limiter
	sem    Semaphore
	key    string
	lim    ConcurrencyLimit
	holder string

	mu       sync.Mutex
	expires  time.Time
	released bool
}

// Acquire takes a permit of key under lim, for a new holder id, and
// returns it with the store's decision. A denial is not an error: the
// Permit is nil and the PermitDecision says when the earliest held permit's
// TTL ends (RetryAfter). The store must have concurrency limits (memstore,
// redisstore, failover, tiered and stack stores do; see Semaphore);
// otherwise the error wraps ErrSemaphoreUnsupported.
//
// The caller must Release the permit when its work ends, on every path
// (defer p.Release(ctx)); work that runs longer than lim.TTL must Extend
// it before Expires.
func (l *Limiter) Acquire(ctx context.Context, key string, lim ConcurrencyLimit) (*Permit, PermitDecision, error) {
	sem, err := l.semaphore()
	if err != nil {
		return nil, PermitDecision{}, err
	}
	return l.acquire(ctx, sem, key, lim.Normalize(), NewHolder())
}

func (l *Limiter) acquire(ctx context.Context, sem Semaphore, key string, lim ConcurrencyLimit, holder string) (*Permit, PermitDecision, error) {
	d, err := sem.Acquire(ctx, key, lim, holder)
	if err != nil || !d.Acquired {
		return nil, d, err
	}
	return &Permit{l: l, sem: sem, key: key, lim: lim, holder: holder, expires: d.Expires}, d, nil
}

func (l *Limiter) semaphore() (FullStore, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if l.store == nil {
		return nil, errNilStore
	}
	return l.full, nil
}

// AcquireWait takes a permit of key under lim, waiting for a slot as long
// as the context allows. When the store can tell (PermitWaker), a release
// wakes it at once; otherwise, and as a fallback, it sleeps each denial's
// RetryAfter (the earliest TTL's end) plus a small jitter, and tries
// again. Every try uses the same holder id, so that a try whose reply was
// lost and that took a slot is renewed by the next one, not counted twice.
//
// It returns the context's error, with the last denial, when the context
// ends first; and at once, with an error wrapping ErrWouldExceedDeadline,
// when the store cannot wake it and the context's deadline comes before
// the earliest TTL ends.
func (l *Limiter) AcquireWait(ctx context.Context, key string, lim ConcurrencyLimit) (*Permit, PermitDecision, error) {
	sem, err := l.semaphore()
	if err != nil {
		return nil, PermitDecision{}, err
	}
	lim = lim.Normalize()
	holder := NewHolder()
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	var last PermitDecision
	for {
		if err := ctx.Err(); err != nil {
			return nil, last, err
		}
		freed := sem.Freed(key) // before the try: a release after it closes this channel; nil: no wake
		p, d, err := l.acquire(ctx, sem, key, lim, holder)
		if err != nil || p != nil {
			return p, d, err
		}
		last = d
		if d.Degraded {
			freed = nil // decided without the store: wait its RetryAfter
		}
		retry := max(d.RetryAfter, MinWaitRetry)
		sleep := retry + l.jitter(retry)
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left <= retry && freed == nil {
				return nil, d, fmt.Errorf("%w: %q frees a permit in %v, deadline in %v", ErrWouldExceedDeadline, key, d.RetryAfter, max(left, 0))
			}
			if sleep >= left {
				sleep = retry
			}
		}
		if t == nil {
			t = time.NewTimer(sleep)
		} else {
			t.Reset(sleep)
		}
		select {
		case <-ctx.Done():
			return nil, d, ctx.Err()
		case <-freed: // nil when the store cannot tell: never ready
		case <-t.C:
		}
	}
}

// Key is the permit's key.
func (p *Permit) Key() string { return p.key }

// Holder is the permit's holder id in the store.
func (p *Permit) Holder() string { return p.holder }

// Limit is the permit's limit.
func (p *Permit) Limit() ConcurrencyLimit { return p.lim }

// Expires is when the permit's TTL ends, on the store's clock, as of the
// last Acquire or Extend.
func (p *Permit) Expires() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.expires
}

// Release gives the permit back, freeing its slot at once. It is
// idempotent: once a Release has succeeded, later calls do nothing and
// return nil; a Release that failed (the store did not answer) may be
// called again, and the TTL frees the slot in any case.
func (p *Permit) Release(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return nil
	}
	if p.l.closed.Load() {
		return ErrClosed
	}
	if err := p.sem.Release(ctx, p.key, p.holder); err != nil {
		return err
	}
	p.released = true
	return nil
}

// Extend renews the permit to the store's now plus its TTL, for work that
// runs longer than a TTL. When the TTL has ended already (or the permit
// was released), the error wraps ErrPermitLost: its slot may
// be another's, and the caller must stop the work, or acquire again.
func (p *Permit) Extend(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return fmt.Errorf("sluice: extend %q: released: %w", p.key, ErrPermitLost)
	}
	if p.l.closed.Load() {
		return ErrClosed
	}
	d, err := p.sem.Extend(ctx, p.key, p.lim, p.holder)
	if err != nil {
		return err
	}
	if !d.Acquired {
		return fmt.Errorf("sluice: extend %q: %w", p.key, ErrPermitLost)
	}
	p.expires = d.Expires
	return nil
}

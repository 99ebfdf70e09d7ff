package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// localPermits remembers the holders of the permits taken locally.
type localPermits struct {
	mu    sync.Mutex
	m     map[permitID]time.Time // TTL end, on the local store's clock
	sweep int                    // the size at which expired entries are next removed
}

type permitID struct{ key, holder string }

func (lp *localPermits) held(key, holder string) bool {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	_, ok := lp.m[permitID{key, holder}]
	return ok
}

func (lp *localPermits) add(key, holder string, exp, now time.Time) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.m == nil {
		lp.m = make(map[permitID]time.Time)
	}
	lp.m[permitID{key, holder}] = exp
	if len(lp.m) >= lp.sweep {
		// Permits neither released nor extended (their holders gone):
		// amortized, as the map doubles.
		for id, e := range lp.m {
			if !e.After(now) {
				delete(lp.m, id)
			}
		}
		lp.sweep = max(2*len(lp.m), 64)
	}
}

func (lp *localPermits) remove(key, holder string) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	delete(lp.m, permitID{key, holder})
}

// semaphore returns the shared store, or ErrClosed.
func (s *Store) semaphore() (sluice.Semaphore, error) {
	if s.isDone.Load() {
		return nil, sluice.ErrClosed
	}
	return s.shared, nil
}

// checkPermit validates a call as the shared store would have.
func checkPermit(key string, lim *sluice.ConcurrencyLimit, holder string) error {
	if err := sluice.ValidateKey(key); err != nil {
		return err
	}
	if lim != nil {
		*lim = lim.Normalize()
		if err := lim.Validate(); err != nil {
			return err
		}
	}
	return sluice.ValidateHolder(holder)
}

// permitCall checks an Acquire or an Extend before it is decided: the
// store is open, ctx has not ended, and the key, limit (normalized) and
// holder are valid. It returns the shared store.
func (s *Store) permitCall(ctx context.Context, key string, lim *sluice.ConcurrencyLimit, holder string) (sluice.Semaphore, error) {
	sem, err := s.semaphore()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkPermit(key, lim, holder); err != nil {
		return nil, err
	}
	return sem, nil
}

// Acquire implements sluice.Semaphore through the shared store (whose
// sluice.ErrSemaphoreUnsupported, when it has no concurrency limits, is
// returned as is), and by the store's default failure mode while that
// does not answer: under sluice.FailError, no decision (an error wrapping
// sluice.ErrNoDecision and the cause).
func (s *Store) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	sem, err := s.permitCall(ctx, key, &lim, holder)
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	if s.locals.held(key, holder) {
		return s.localAcquire(ctx, key, lim, holder, nil), nil // renewed where it was taken
	}
	cause := ErrBreakerOpen
	if !s.br.open() {
		c := s.begin(ctx)
		d, err := sem.Acquire(c.ctx, key, lim, holder)
		failure, ok := s.end(c, err)
		if !ok {
			return sluice.PermitDecision{}, failure
		} else if failure == nil {
			return d, nil
		}
		cause = failure
	}
	if s.cfg.mode == sluice.FailError {
		s.undecidedCalls.Add(1)
		if s.cfg.log.Enabled(ctx, slog.LevelDebug) {
			s.cfg.log.DebugContext(ctx, "failover: no permit decision (failure mode error)", "key", key, "limit", lim, "cause", cause)
		}
		return sluice.PermitDecision{}, fmt.Errorf("%w: %w", sluice.ErrNoDecision, cause)
	}
	return s.localAcquire(ctx, key, lim, holder, cause), nil
}

// localAcquire decides an Acquire without the shared store, by the store's
// default failure mode; a nil cause renews a local permit.
func (s *Store) localAcquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string, cause error) sluice.PermitDecision {
	m := s.cfg.mode
	local, ok := s.localShare(lim)
	if !ok {
		if m == sluice.FailOpen {
			cause = ErrNoReplicas
		}
		s.permitAccount(ctx, key, lim, m, false, cause)
		return sluice.PermitDecision{Limit: lim, Degraded: true, RetryAfter: s.cfg.probeInterval}
	}
	d, err := s.local.Acquire(ctx, key, local, holder)
	if err != nil {
		// The local share is full of keys: deny, as FailClosed.
		d = sluice.PermitDecision{RetryAfter: s.cfg.probeInterval}
	}
	d.Limit, d.Degraded = lim, true
	if d.Acquired {
		s.locals.add(key, holder, d.Expires, s.cfg.now())
	}
	if cause != nil {
		s.permitAccount(ctx, key, lim, m, d.Acquired, cause)
	}
	return d
}

// localShare is the local semaphore of lim under the store's default
// failure mode: max(Max/Replicas, 1) for FailOpen, sluice.MaxPermits for
// FailOpenUnbounded and FailUncounted (no permit held counts); false when
// the mode admits nothing locally.
func (s *Store) localShare(lim sluice.ConcurrencyLimit) (sluice.ConcurrencyLimit, bool) {
	switch {
	case s.cfg.mode == sluice.FailOpenUnbounded, s.cfg.mode == sluice.FailUncounted:
		lim.Max = sluice.MaxPermits
	case s.cfg.mode == sluice.FailOpen && s.cfg.replicas > 0:
		lim.Max = max(lim.Max/s.cfg.replicas, 1)
	default:
		return lim, false
	}
	return lim, true
}

// Release implements sluice.Semaphore. A permit taken locally is released
// locally; another passes to the shared store, and while that does not
// answer the error wraps ErrUnavailable (the slot frees when its TTL
// ends).
func (s *Store) Release(ctx context.Context, key string, holder string) error {
	sem, err := s.semaphore()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkPermit(key, nil, holder); err != nil {
		return err
	}
	if s.locals.held(key, holder) {
		s.locals.remove(key, holder)
		return s.local.Release(ctx, key, holder)
	}
	if s.br.open() {
		return fmt.Errorf("failover: release %q: %w", key, ErrBreakerOpen)
	}
	c := s.begin(ctx)
	err = sem.Release(c.ctx, key, holder)
	err, _ = s.end(c, err)
	return err
}

// Extend implements sluice.Semaphore. A permit taken locally is extended
// locally; another passes to the shared store, and while that does not
// answer Extend returns a Degraded decision and an error wrapping
// ErrUnavailable: not sluice.ErrPermitLost, since the permit may be held
// until its TTL ends.
func (s *Store) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	sem, err := s.permitCall(ctx, key, &lim, holder)
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	if s.locals.held(key, holder) {
		local, _ := s.localShare(lim)
		d, err := s.local.Extend(ctx, key, local, holder)
		d.Limit, d.Degraded = lim, true
		if errors.Is(err, sluice.ErrPermitLost) {
			s.locals.remove(key, holder)
		} else if err == nil {
			s.locals.add(key, holder, d.Expires, s.cfg.now())
		}
		return d, err
	}
	down := sluice.PermitDecision{Limit: lim, Degraded: true, RetryAfter: s.cfg.probeInterval}
	if s.br.open() {
		return down, fmt.Errorf("failover: extend %q: %w", key, ErrBreakerOpen)
	}
	c := s.begin(ctx)
	d, err := sem.Extend(c.ctx, key, lim, holder)
	if errors.Is(err, sluice.ErrPermitLost) {
		s.end(c, nil) // an answer: the permit is lost
		return d, err
	}
	failure, ok := s.end(c, err)
	if !ok {
		return sluice.PermitDecision{}, failure
	} else if failure != nil {
		return down, fmt.Errorf("failover: extend %q: %w", key, failure)
	}
	return d, nil
}

func (s *Store) permitAccount(ctx context.Context, key string, lim sluice.ConcurrencyLimit, m sluice.FailureMode, acquired bool, cause error) {
	if acquired {
		s.degradedAllowed.Add(1)
	} else {
		s.degradedDenied.Add(1)
	}
	if s.cfg.log.Enabled(ctx, slog.LevelDebug) {
		s.cfg.log.DebugContext(ctx, "failover: degraded permit decision", "key", key, "limit", lim, "mode", m, "acquired", acquired, "cause", cause)
	}
}

// Freed implements sluice.PermitWaker by passing the call to the shared
// store while the breaker is closed; otherwise it returns nil (no wake: a
// waiter sleeps until the earliest TTL ends, or the probe interval of a
// degraded denial).
func (s *Store) Freed(key string) <-chan struct{} {
	if s.br.open() || s.isDone.Load() {
		return nil
	}
	return s.shared.Freed(key)
}

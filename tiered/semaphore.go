package tiered

import (
	"context"

	"github.com/sluicehq/sluice"
)

// The concurrency limits pass through: a local tier cannot hold permits
// for the fleet.

// Acquire implements sluice.Semaphore by passing the call to the shared
// store (see the package documentation); one without concurrency limits
// returns its sluice.ErrSemaphoreUnsupported.
func (s *Store) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	if s.closed.Load() {
		return sluice.PermitDecision{}, sluice.ErrClosed
	}
	return s.shared.Acquire(ctx, key, lim, holder)
}

// Release implements sluice.Semaphore by passing the call to the shared
// store.
func (s *Store) Release(ctx context.Context, key, holder string) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	return s.shared.Release(ctx, key, holder)
}

// Extend implements sluice.Semaphore by passing the call to the shared
// store.
func (s *Store) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	if s.closed.Load() {
		return sluice.PermitDecision{}, sluice.ErrClosed
	}
	return s.shared.Extend(ctx, key, lim, holder)
}

// Freed implements sluice.PermitWaker by passing the call to the shared
// store (nil, no wake, when it cannot tell or this store is closed).
func (s *Store) Freed(key string) <-chan struct{} {
	if s.closed.Load() {
		return nil
	}
	return s.shared.Freed(key)
}

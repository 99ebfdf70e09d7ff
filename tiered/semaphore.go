package tiered

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
)

var (
	_ sluice.Semaphore   = (*Store)(nil)
	_ sluice.PermitWaker = (*Store)(nil)
)

func (s *Store) semaphore() (sluice.Semaphore, error) {
	if s.closed.Load() {
		return nil, sluice.ErrClosed
	}
	sem, ok := s.shared.(sluice.Semaphore)
	if !ok {
		return nil, fmt.Errorf("tiered: %w: shared store %T", sluice.ErrSemaphoreUnsupported, s.shared)
	}
	return sem, nil
}

// Acquire implements sluice.Semaphore by passing the call to the shared
// store (see the package documentation); a shared store that is not a
// sluice.Semaphore makes the error wrap sluice.ErrSemaphoreUnsupported.
func (s *Store) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	sem, err := s.semaphore()
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	return sem.Acquire(ctx, key, lim, holder)
}

// Release implements sluice.Semaphore by passing the call to the shared
// store.
func (s *Store) Release(ctx context.Context, key, holder string) error {
	sem, err := s.semaphore()
	if err != nil {
		return err
	}
	return sem.Release(ctx, key, holder)
}

// Extend implements sluice.Semaphore by passing the call to the shared
// store.
func (s *Store) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	sem, err := s.semaphore()
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	return sem.Extend(ctx, key, lim, holder)
}

// Freed implements sluice.PermitWaker by passing the call to the shared
// store when it is one, and returns nil (no wake: sleep until the earliest
// lease ends) otherwise.
func (s *Store) Freed(key string) <-chan struct{} {
	if w, ok := s.shared.(sluice.PermitWaker); ok && !s.closed.Load() {
		return w.Freed(key)
	}
	return nil
}

package sluice

import (
	"context"
	"fmt"
	"io"
	"time"
)

// FullStore is a Store with the methods of every capability a store may
// have: deciding several limits all or nothing (MultiStore), reserving
// units and returning them (Reserver), putting a key back to untouched
// (Resetter), concurrency limits (Semaphore) and waking their waiters
// (PermitWaker), and Close. A store that lacks a capability still has its
// methods, which say so: each returns an error wrapping the capability's
// sentinel (ErrMultiUnsupported, ErrReserveUnsupported,
// ErrResetUnsupported, ErrSemaphoreUnsupported), and Freed returns nil.
//
// It is the seam between layers. A wrapper (failover, tiered, stack, or
// one of yours that times or traces store calls) holds the FullStore below
// it and forwards every call it does not decide itself, with no type
// assertion and no branch per capability: what the store below lacks
// comes back as that capability's error, which the wrapper passes on.
//
// To write a store, implement Store: AllowN is all that New needs. To
// offer more, embed Unsupported and implement the methods of the
// capabilities the store has; the others keep reporting them unsupported,
// and a method added to FullStore later does too:
//
//	type Store struct {
//		sluice.Unsupported // every capability unsupported until implemented
//		// ...
//	}
//
//	var _ sluice.FullStore = (*Store)(nil)
//
//	func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) { ... }
//	func (s *Store) Reset(ctx context.Context, key string, lim sluice.Limit) error { ... }
//
// Lift turns any Store into a FullStore; sluicetest.Run holds a store to
// the contract of every capability it has, and skips the cases of those
// it reports unsupported.
//
// Close releases what the store holds; a wrapper's Close does not close
// the store below it, which its caller owns.
type FullStore interface {
	MultiStore
	Reserver
	Resetter
	Semaphore
	PermitWaker
	io.Closer
}

// Unsupported is the embeddable default of a FullStore: it has every
// method of FullStore but AllowN, each reporting its capability as
// unsupported (an error wrapping the capability's sentinel; Freed returns
// nil, and Close does nothing). A store embeds it and implements AllowN
// and the methods of what it supports.
type Unsupported struct{}

// AllowMulti returns ErrMultiUnsupported.
func (Unsupported) AllowMulti(context.Context, []Request) ([]Decision, error) {
	return nil, ErrMultiUnsupported
}

// Reserve returns ErrReserveUnsupported.
func (Unsupported) Reserve(context.Context, string, Limit, int) (Decision, time.Time, error) {
	return Decision{}, time.Time{}, ErrReserveUnsupported
}

// Return returns ErrReserveUnsupported.
func (Unsupported) Return(context.Context, string, Limit, int, time.Time) error {
	return ErrReserveUnsupported
}

// Reset returns ErrResetUnsupported.
func (Unsupported) Reset(context.Context, string, Limit) error { return ErrResetUnsupported }

// Acquire returns ErrSemaphoreUnsupported.
func (Unsupported) Acquire(context.Context, string, ConcurrencyLimit, string) (PermitDecision, error) {
	return PermitDecision{}, ErrSemaphoreUnsupported
}

// Release returns ErrSemaphoreUnsupported.
func (Unsupported) Release(context.Context, string, string) error { return ErrSemaphoreUnsupported }

// Extend returns ErrSemaphoreUnsupported.
func (Unsupported) Extend(context.Context, string, ConcurrencyLimit, string) (PermitDecision, error) {
	return PermitDecision{}, ErrSemaphoreUnsupported
}

// Freed returns nil: no wake, a waiter sleeps until the earliest permit's
// TTL ends.
func (Unsupported) Freed(string) <-chan struct{} { return nil }

// Close does nothing.
func (Unsupported) Close() error { return nil }

// Lift returns s as a FullStore: s itself when it is one; otherwise a
// FullStore that passes AllowN to s, and each other method to s when s
// implements that capability's interface (MultiStore, Reserver or the
// deprecated Leaser, Resetter, Semaphore, PermitWaker, io.Closer), or
// reports it unsupported. Lift(nil) is nil.
//
// Lift is where a store written against the small interfaces meets the
// seam: New, failover, tiered and stack lift the store they are given, and
// call it through FullStore from then on.
func Lift(s Store) FullStore {
	if s == nil {
		return nil
	}
	if f, ok := s.(FullStore); ok {
		return f
	}
	l := &lifted{Store: s}
	l.multi, _ = s.(MultiStore)
	l.reserver, _ = s.(Reserver)
	if l.reserver == nil {
		if ls, ok := s.(Leaser); ok {
			l.reserver = leaserReserver{ls}
		}
	}
	l.resetter, _ = s.(Resetter)
	l.sem, _ = s.(Semaphore)
	l.waker, _ = s.(PermitWaker)
	l.closer, _ = s.(io.Closer)
	return l
}

// lifted is a Store lifted to a FullStore: each capability it lacks is
// nil, and reported unsupported.
type lifted struct {
	Store
	multi    MultiStore
	reserver Reserver
	resetter Resetter
	sem      Semaphore
	waker    PermitWaker
	closer   io.Closer
}

func (l *lifted) AllowMulti(ctx context.Context, reqs []Request) ([]Decision, error) {
	if l.multi == nil {
		return nil, fmt.Errorf("%w: %T", ErrMultiUnsupported, l.Store)
	}
	return l.multi.AllowMulti(ctx, reqs)
}

func (l *lifted) Reserve(ctx context.Context, key string, lim Limit, n int) (Decision, time.Time, error) {
	if l.reserver == nil {
		return Decision{}, time.Time{}, fmt.Errorf("%w: %T", ErrReserveUnsupported, l.Store)
	}
	return l.reserver.Reserve(ctx, key, lim, n)
}

func (l *lifted) Return(ctx context.Context, key string, lim Limit, n int, at time.Time) error {
	if l.reserver == nil {
		return fmt.Errorf("%w: %T", ErrReserveUnsupported, l.Store)
	}
	return l.reserver.Return(ctx, key, lim, n, at)
}

func (l *lifted) Reset(ctx context.Context, key string, lim Limit) error {
	if l.resetter == nil {
		return fmt.Errorf("%w: %T", ErrResetUnsupported, l.Store)
	}
	return l.resetter.Reset(ctx, key, lim)
}

func (l *lifted) Acquire(ctx context.Context, key string, lim ConcurrencyLimit, holder string) (PermitDecision, error) {
	if l.sem == nil {
		return PermitDecision{}, fmt.Errorf("%w: %T", ErrSemaphoreUnsupported, l.Store)
	}
	return l.sem.Acquire(ctx, key, lim, holder)
}

func (l *lifted) Release(ctx context.Context, key, holder string) error {
	if l.sem == nil {
		return fmt.Errorf("%w: %T", ErrSemaphoreUnsupported, l.Store)
	}
	return l.sem.Release(ctx, key, holder)
}

func (l *lifted) Extend(ctx context.Context, key string, lim ConcurrencyLimit, holder string) (PermitDecision, error) {
	if l.sem == nil {
		return PermitDecision{}, fmt.Errorf("%w: %T", ErrSemaphoreUnsupported, l.Store)
	}
	return l.sem.Extend(ctx, key, lim, holder)
}

func (l *lifted) Freed(key string) <-chan struct{} {
	if l.waker == nil {
		return nil
	}
	return l.waker.Freed(key)
}

func (l *lifted) Close() error {
	if l.closer == nil {
		return nil
	}
	return l.closer.Close()
}

// String describes the store lifted.
func (l *lifted) String() string { return fmt.Sprint(l.Store) }

// leaserReserver is a deprecated Leaser as a Reserver.
type leaserReserver struct{ Leaser }

func (r leaserReserver) Reserve(ctx context.Context, key string, lim Limit, n int) (Decision, time.Time, error) {
	return r.Lease(ctx, key, lim, n)
}

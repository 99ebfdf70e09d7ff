// Package route is a sluice.FullStore over two stores that sends each
// limit to one of them: envoyproxy/ratelimit's second Redis for per-second
// limits (REDIS_PERSECOND), which keeps their short-lived, busy counters
// apart from the others.
//
//	s, err := route.New(mainRedis, perSecondRedis, route.PerSecond)
//
// Every call that names a limit (AllowN, Reserve, Return, Reset) goes to
// Other when Match(limit) is true, else to Main, whole: each store decides
// its own limits exactly, as it would alone. Concurrency limits (Acquire,
// Release, Extend, Freed) name no Limit and go to Main.
//
// # Several limits at once
//
// AllowMulti whose limits all go to one store is that store's AllowMulti:
// all or nothing, exactly. Limits spread over both stores cannot be
// decided by one atomic step; Store decides them in two, so that no limit
// ever admits more than it allows and what stays counted is all or
// nothing:
//
//  1. Main's limits, by Main's AllowMulti. If it denies, nothing of it was
//     counted; Other's limits are only peeked at (cost 0), and the call
//     is denied.
//  2. Otherwise Other's limits, by Other's AllowMulti, whose answer is
//     final. If it denies (or fails), the units Main admitted in step 1
//     are given back (Main's Return, at Main's time now) and the call is
//     denied (or returns the error).
//
// What this gives up, and only when the two stores disagree: between the
// two steps Main's units are counted, so a concurrent request may be
// denied for units that are then given back (stricter, never looser); a
// refund that fails (Main down, or unable to Return) leaves them counted
// (stricter); and a refund that arrives after a Main limit's fixed window
// ended is taken from the next window, which may then admit up to that
// request's cost more, once. Main holds the longer limits, so its windows
// rarely end in that instant, and Other's answers (the short ones) are
// never taken back. A request of Other's found short by its peek in step
// 1 reports RetryAfter as its ResetAfter, an upper bound of the exact wait
// (a peek does not tell the wait of a cost). A limit that counts every hit
// (sluice.CountAll) is charged in its step whatever the outcome, and is
// never given back.
package route

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

var _ sluice.FullStore = (*Store)(nil)

// PerSecond reports whether lim counts per second or less (a Period of at
// most one second): the limits envoyproxy/ratelimit keeps in its per-second
// Redis (those of unit second), and windows shorter than a second.
func PerSecond(lim sluice.Limit) bool { return lim.Period <= time.Second }

// Store sends each limit's calls to Main or Other. It is safe for
// concurrent use when both stores are.
type Store struct {
	main, other sluice.FullStore
	match       func(sluice.Limit) bool
}

// New returns a Store that decides a limit through other when match
// reports true for it, else through main. Close closes neither store:
// the caller owns them.
func New(main, other sluice.Store, match func(sluice.Limit) bool) (*Store, error) {
	if main == nil || other == nil || match == nil {
		return nil, errors.New("route: New needs a main store, another store and a match function")
	}
	return &Store{main: sluice.Lift(main), other: sluice.Lift(other), match: match}, nil
}

// of is the store that decides lim.
func (s *Store) of(lim sluice.Limit) sluice.FullStore {
	if s.match(lim) {
		return s.other
	}
	return s.main
}

// AllowN implements sluice.Store by the store of lim.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	return s.of(lim).AllowN(ctx, key, lim, n)
}

// Reserve implements sluice.Reserver by the store of lim.
func (s *Store) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	return s.of(lim).Reserve(ctx, key, lim, n)
}

// Return implements sluice.Reserver by the store of lim.
func (s *Store) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	return s.of(lim).Return(ctx, key, lim, n, at)
}

// Reset implements sluice.Resetter by the store of lim.
func (s *Store) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	return s.of(lim).Reset(ctx, key, lim)
}

// Acquire implements sluice.Semaphore by Main.
func (s *Store) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	return s.main.Acquire(ctx, key, lim, holder)
}

// Release implements sluice.Semaphore by Main.
func (s *Store) Release(ctx context.Context, key, holder string) error {
	return s.main.Release(ctx, key, holder)
}

// Extend implements sluice.Semaphore by Main.
func (s *Store) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	return s.main.Extend(ctx, key, lim, holder)
}

// Freed implements sluice.PermitWaker by Main.
func (s *Store) Freed(key string) <-chan struct{} { return s.main.Freed(key) }

// Close does nothing: the stores are the caller's.
func (s *Store) Close() error { return nil }

// String describes the store for logs.
func (s *Store) String() string { return fmt.Sprintf("route(%v, per-limit %v)", s.main, s.other) }

// AllowMulti implements sluice.MultiStore: by one store's AllowMulti when
// every limit is that store's, else in two steps (see the package
// documentation). A store that cannot decide several limits at once
// returns its sluice.ErrMultiUnsupported, passed on; AllowMulti of no
// request asks both.
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	var first, second []int // indexes of Main's requests, of Other's
	for i, rq := range reqs {
		if s.match(rq.Limit) {
			second = append(second, i)
		} else {
			first = append(first, i)
		}
	}
	switch {
	case len(reqs) == 0:
		if _, err := s.main.AllowMulti(ctx, nil); err != nil {
			return nil, err
		}
		return s.other.AllowMulti(ctx, nil)
	case len(second) == 0:
		return s.main.AllowMulti(ctx, reqs)
	case len(first) == 0:
		return s.other.AllowMulti(ctx, reqs)
	}
	// Checked whole before either store counts anything, as one store
	// would.
	for i, rq := range reqs {
		if err := validate.Request(rq.Key, rq.Limit, rq.N); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}
	if err := validate.Multi(reqs); err != nil {
		return nil, err
	}
	ds := make([]sluice.Decision, len(reqs))
	d1, err := s.main.AllowMulti(ctx, pick(reqs, first, false))
	if err != nil {
		return nil, err
	}
	place(ds, first, d1)
	if !allAllowed(d1) {
		// Denied by Main: nothing of its counted, Other's limits peeked
		// at (those counting every hit still charged).
		d2, err := s.other.AllowMulti(ctx, pick(reqs, second, true))
		if err != nil {
			return nil, err
		}
		for j, i := range second {
			d := d2[j]
			if rq := reqs[i]; rq.Limit.Counting != sluice.CountAll && d.Remaining < rq.N && d.RetryAfter == 0 {
				d.RetryAfter = max(d.ResetAfter, time.Nanosecond) // would block: an upper bound
			}
			d.Allowed = false
			ds[i] = d
		}
		return ds, nil
	}
	d2, err := s.other.AllowMulti(ctx, pick(reqs, second, false))
	if err != nil {
		s.giveBack(ctx, reqs, first)
		return nil, err
	}
	place(ds, second, d2)
	if !allAllowed(d2) {
		s.giveBack(ctx, reqs, first)
		for _, i := range first {
			d := &ds[i]
			if rq := reqs[i]; rq.Limit.Counting != sluice.CountAll {
				d.Remaining = min(d.Remaining+rq.N, rq.Limit.Capacity())
			}
			d.Allowed, d.RetryAfter = false, 0
		}
	}
	return ds, nil
}

// giveBack returns the units Main admitted for reqs[idx], but those of
// limits counting every hit, which stay charged. A refund that fails
// leaves its units counted.
func (s *Store) giveBack(ctx context.Context, reqs []sluice.Request, idx []int) {
	ctx = context.WithoutCancel(ctx) // the units are counted whatever the caller does now
	for _, i := range idx {
		rq := reqs[i]
		if rq.N == 0 || rq.Limit.Counting == sluice.CountAll {
			continue
		}
		_ = s.main.Return(ctx, rq.Key, rq.Limit, rq.N, time.Time{})
	}
}

// pick returns reqs[idx]; with peek, the cost of each limit that counts
// only what it admits is 0.
func pick(reqs []sluice.Request, idx []int, peek bool) []sluice.Request {
	out := make([]sluice.Request, len(idx))
	for j, i := range idx {
		out[j] = reqs[i]
		if peek && out[j].Limit.Counting != sluice.CountAll {
			out[j].N = 0
		}
	}
	return out
}

// place puts the decisions ds of reqs[idx] in all.
func place(all []sluice.Decision, idx []int, ds []sluice.Decision) {
	for j, i := range idx {
		all[i] = ds[j]
	}
}

func allAllowed(ds []sluice.Decision) bool {
	for _, d := range ds {
		if !d.Allowed {
			return false
		}
	}
	return true
}

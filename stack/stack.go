// Package stack builds the recommended composition of sluice's wrappers
// over a shared store (Redis, through redisstore): the local tier of
// package tiered outside, the deadline, breaker and failure modes of
// package failover inside,
//
//	tiered(failover(shared))
//
// so that a decision passes each layer at most once, and neither layer
// knows the other's shape:
//
//   - tiered is the entrance. A decision it can make locally (a spend from
//     a lease, a cached denial, the approximate local share) never waits
//     for a deadline or a breaker, and units leased before an outage keep
//     being spent during it: the shared store admitted them.
//   - failover sits on every shared call: AllowN, AllowMulti, Reserve and
//     Return each run under its deadline and count towards its breaker.
//     While the shared store does not answer, failover decides by each
//     limit's failure mode (sluice.Limit.FailureMode, or the default of
//     failover.WithDefaultMode) and marks the decision Degraded; tiered
//     never caches a degraded denial and never leases from a degraded
//     answer, so the local tier holds only what the shared store decided.
//
// Without WithTiered there is no local tier: the stack is
// failover(shared). WithRoute adds a second shared store for some limits
// (route.PerSecond: envoyproxy/ratelimit's per-second Redis), with a
// failover layer of its own: tiered(route(failover(shared),
// failover(other))). The shared store validates every request that reaches
// it; failover validates those it decides itself. Leases
// (tiered.WithLeases) need a shared store that can reserve units
// (sluice.Reserver), as redisstore and memstore can; over one that cannot,
// the decisions that would lease are each decided by the shared store's
// AllowN.
package stack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/tiered"
)

var _ sluice.FullStore = (*Store)(nil)

// Option configures a Store.
type Option func(*config)

type config struct {
	failover []failover.Option
	tiered   []tiered.Option
	local    bool // a local tier

	other      sluice.Store // WithRoute's; nil: none
	match      func(sluice.Limit) bool
	otherFails []failover.Option
}

// WithFailover configures the failover layer (see package failover). It
// may be given more than once; the options add up.
func WithFailover(opts ...failover.Option) Option {
	return func(c *config) { c.failover = append(c.failover, opts...) }
}

// WithRoute decides the limits for which match reports true (such as
// route.PerSecond) through other instead of the shared store, as
// envoyproxy/ratelimit's per-second Redis: other gets a failover layer of
// its own, configured by opts alone (its deadline, breaker and failure
// modes, apart from the shared store's), and package route sends each
// limit to its store below the local tier:
//
//	tiered(route(failover(shared), failover(other)))
//
// See package route for what AllowMulti across both stores guarantees.
func WithRoute(other sluice.Store, match func(sluice.Limit) bool, opts ...failover.Option) Option {
	return func(c *config) {
		c.other, c.match, c.otherFails = other, match, opts
	}
}

// WithTiered adds the local tier, configured by opts (see package tiered;
// with none, it only caches denials). It may be given more than once; the
// options add up.
func WithTiered(opts ...tiered.Option) Option {
	return func(c *config) {
		c.local = true
		c.tiered = append(c.tiered, opts...)
	}
}

// Store is the stack: a sluice.FullStore whose every method goes to the
// top layer (tiered, or failover without WithTiered), which passes on what
// it does not decide itself; what the shared store cannot do comes back as
// that capability's error. It is safe for concurrent use.
type Store struct {
	top sluice.FullStore // ts, or fs (or the route) without a local tier
	fs  *failover.Store
	fs2 *failover.Store // WithRoute's other store's; nil without
	ts  *tiered.Store   // nil: no local tier
}

// New builds the stack over shared, or returns the error of the first
// invalid option. Close closes the layers; it does not close shared, which
// the caller owns.
func New(shared sluice.Store, opts ...Option) (*Store, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	fs, err := failover.New(shared, c.failover...)
	if err != nil {
		return nil, err
	}
	s := &Store{top: fs, fs: fs}
	if c.other != nil {
		if s.fs2, err = failover.New(c.other, c.otherFails...); err != nil {
			fs.Close()
			return nil, fmt.Errorf("stack: WithRoute: %w", err)
		}
		r, err := route.New(fs, s.fs2, c.match)
		if err != nil {
			s.closeFailovers()
			return nil, fmt.Errorf("stack: WithRoute: %w", err)
		}
		s.top = r
	}
	if c.local {
		if s.ts, err = tiered.New(s.top, c.tiered...); err != nil {
			s.closeFailovers()
			return nil, err
		}
		s.top = s.ts
	}
	return s, nil
}

// closeFailovers closes the failover layers.
func (s *Store) closeFailovers() error {
	err := s.fs.Close()
	if s.fs2 != nil {
		err = errors.Join(err, s.fs2.Close())
	}
	return err
}

// AllowN implements sluice.Store: decided by the local tier when it can,
// else by the shared store under failover's deadline and breaker, else by
// the limit's failure mode.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	return s.top.AllowN(ctx, key, lim, n)
}

// AllowMulti implements sluice.MultiStore through the layers, as AllowN.
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	return s.top.AllowMulti(ctx, reqs)
}

// Reserve implements sluice.Reserver through the layers (tiered passes it
// to failover, which gives it its deadline and breaker): a reservation that
// sluice.Limiter.Reserve settles later. While the shared store cannot
// answer it returns a degraded Decision, reserving nothing.
func (s *Store) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	return s.top.Reserve(ctx, key, lim, n)
}

// Lease is Reserve's former name.
//
// Deprecated: use Reserve.
func (s *Store) Lease(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	return s.top.Reserve(ctx, key, lim, n)
}

// Return implements sluice.Reserver through the layers: a refund (a zero
// at is the shared store's time now), which the local tier sees at once.
// While the shared store does not answer, a refund is dropped with an
// error: that only makes the limit stricter.
func (s *Store) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	return s.top.Return(ctx, key, lim, n, at)
}

// Reset implements sluice.Resetter through the layers: the local tier
// drops its leases and cached denials of the key, failover resets its
// local share and passes the reset to the shared store under its deadline
// and breaker. While the shared store does not answer, Reset returns an
// error wrapping failover.ErrUnavailable (failover.ErrBreakerOpen while
// the breaker is open): the shared state was not reset, and the caller
// should try again.
func (s *Store) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	return s.top.Reset(ctx, key, lim)
}

// Acquire implements sluice.Semaphore through the layers: tiered passes
// concurrency limits to failover (a local tier cannot hold permits for the
// fleet), which gives them its deadline, breaker and failure mode (see
// package failover).
func (s *Store) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	return s.top.Acquire(ctx, key, lim, holder)
}

// Release implements sluice.Semaphore through the layers.
func (s *Store) Release(ctx context.Context, key, holder string) error {
	return s.top.Release(ctx, key, holder)
}

// Extend implements sluice.Semaphore through the layers.
func (s *Store) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	return s.top.Extend(ctx, key, lim, holder)
}

// Freed implements sluice.PermitWaker through the layers: nil (no wake)
// unless the shared store can tell and failover's breaker is closed.
func (s *Store) Freed(key string) <-chan struct{} { return s.top.Freed(key) }

// Close closes the local tier (returning its unspent leased units through
// failover) and then failover (both, with WithRoute). Later calls return sluice.ErrClosed.
func (s *Store) Close() error {
	var err error
	if s.ts != nil {
		err = s.ts.Close()
	}
	return errors.Join(err, s.closeFailovers())
}

// Ready reports whether failover's breaker is closed (each one's, with
// WithRoute): the shared stores are in use. Readiness probes report it.
func (s *Store) Ready() bool { return s.fs.Ready() && (s.fs2 == nil || s.fs2.Ready()) }

// Failover returns the failover layer of the shared store, for its Stats.
func (s *Store) Failover() *failover.Store { return s.fs }

// RouteFailover returns the failover layer of WithRoute's other store, or
// nil without WithRoute.
func (s *Store) RouteFailover() *failover.Store { return s.fs2 }

// Tiered returns the local tier, for its Stats, or nil without WithTiered.
func (s *Store) Tiered() *tiered.Store { return s.ts }

// String describes the stack for logs.
func (s *Store) String() string { return fmt.Sprint(s.top) }

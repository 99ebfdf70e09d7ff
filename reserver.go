package sluice

import (
	"context"
	"errors"
	"time"
)

// Reserver is a Store that can reserve units, admitting them now and
// reporting when, and take back the ones not used: Limiter.Reserve and
// Limiter.Refund use it, and tiered takes its leases (units spent locally)
// with it. A reserved unit counts exactly like an admitted request until
// it is returned. It is part of FullStore.
//
// A Reserve that returns a Decision with Degraded true (and Allowed false),
// a zero time and a nil error admitted and reserved nothing: the store
// could not reserve (failover's, while its shared store does not answer),
// and the caller decides the request with AllowN instead, which applies
// the limit's failure mode. Its RetryAfter is how long the caller should
// decide the key without reservations before it asks for one again.
//
// A store that cannot reserve at all returns an error wrapping
// ErrReserveUnsupported from both methods (Unsupported's do).
type Reserver interface {
	Store
	// Reserve admits n like AllowN and also reports the store's time of
	// the admission (Redis time for redisstore), which Return needs.
	Reserve(ctx context.Context, key string, lim Limit, n int) (Decision, time.Time, error)
	// Return gives back n units reserved at at: afterwards the key is as
	// if they had never been admitted, as far as they still count at all.
	// Returning more than was reserved cannot raise the limit beyond an
	// untouched key. A zero at means the store's own time now (Redis time
	// for redisstore): a refund whose admission time the caller does not
	// know (Envoy's is_negative_hits) gives back units as if they had been
	// admitted now, so that it credits at most what the key counts at
	// present: the units leave the current window, move a bucket's TAT
	// back by their full worth, or remove a log's newest entries; an
	// untouched key stays untouched and a key in debt (a limit counting
	// every hit) has its debt reduced. n may be up to MaxCharge whatever
	// the limit's Counting. Limiter.Refund calls it with a zero at, and
	// Reservation.Settle with the reservation's time.
	Return(ctx context.Context, key string, lim Limit, n int, at time.Time) error
}

// Leaser is the former shape of Reserver, whose Reserve was called Lease.
// Lift (and so New, failover, tiered and stack) still accepts a store
// that implements it, and calls its Lease for Reserve.
//
// Deprecated: implement Reserver: rename Lease to Reserve.
type Leaser interface {
	Store
	Lease(ctx context.Context, key string, lim Limit, n int) (Decision, time.Time, error)
	Return(ctx context.Context, key string, lim Limit, n int, at time.Time) error
}

// ErrReserveUnsupported is returned by the Reserve and Return of a store
// that cannot reserve units (Unsupported's, a lifted store that is not a
// Reserver, a wrapper over one), and so by Limiter.Reserve and
// Limiter.Refund.
var ErrReserveUnsupported = errors.New("sluice: store does not support Reserve and Return")

// ErrLeaseUnsupported is the former name of ErrReserveUnsupported, the
// same error.
//
// Deprecated: use ErrReserveUnsupported.
var ErrLeaseUnsupported = ErrReserveUnsupported

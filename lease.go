package sluice

import (
	"context"
	"time"
)

// Leaser is a Store that can hand out units in advance and take back the
// ones not spent; tiered uses it for leases. A leased unit counts exactly
// like an admitted request until it is returned.
//
// A Lease that returns a Decision with Degraded true (and Allowed false), a
// zero time and a nil error admitted and leased nothing: the store could
// not lease (failover's, while its shared store does not answer), and the
// caller decides the request with AllowN instead, which applies the limit's
// failure mode. Its RetryAfter is how long the caller should decide the
// key without leases before it asks for one again.
type Leaser interface {
	Store
	// Lease admits n like AllowN and also reports the store's time of the
	// admission (Redis time for redisstore), which Return needs.
	Lease(ctx context.Context, key string, lim Limit, n int) (Decision, time.Time, error)
	// Return gives back n units of a lease admitted at at: afterwards the
	// key is as if they had never been admitted, as far as they still
	// count at all. Returning more than was leased cannot raise the limit
	// beyond an untouched key. A zero at means the store's own time now
	// (Redis time for redisstore): a refund whose admission time the caller
	// does not know (Envoy's is_negative_hits) gives back units as if they
	// had been admitted now, so that it credits at most what the key
	// counts at present: the units leave the current window, move a
	// bucket's TAT back by their full worth, or remove a log's newest
	// entries; an untouched key stays untouched and a key in debt (a limit
	// counting every hit) has its debt reduced. n may be up to MaxCharge
	// whatever the limit's Counting. Limiter.Refund calls it with a zero
	// at, and Reservation.Settle with the reservation's time.
	Return(ctx context.Context, key string, lim Limit, n int, at time.Time) error
}

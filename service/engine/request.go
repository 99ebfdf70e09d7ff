package engine

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/config"
)

// Request is one decision to make: the descriptors of a request in Domain.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Hits is the request's cost, for every descriptor that does not set
	// its own; 0 means 1 (the reference's hits_addend).
	Hits uint32
}

// Entry is one key and value of a descriptor.
type Entry = config.Entry

// Descriptor is one descriptor of a request.
type Descriptor struct {
	Entries []Entry
	// Limit, when set, replaces the configured limits of the descriptor by
	// a fixed window of its own (the reference's RateLimitOverride).
	Limit *Override
	// Hits is the descriptor's own cost when HasHits is set (0 included: a
	// peek that counts nothing); otherwise the request's Hits apply.
	Hits    uint64
	HasHits bool
	// NegativeHits gives the descriptor's hits back to each of its limits
	// instead of spending them (Envoy's is_negative_hits): a refund. The
	// store must be a sluice.Reserver.
	NegativeHits bool
}

// Override is a descriptor's own limit: RequestsPerUnit per Unit, counted
// in a fixed window.
type Override struct {
	RequestsPerUnit uint32
	// Unit is the unit's name as the reference spells it (SECOND, MINUTE,
	// ...), Period its length; a zero Period is a unit that is not
	// supported, and Unit then says what was sent.
	Unit   string
	Period time.Duration
}

// Code is the answer for a descriptor or a request.
type Code uint8

const (
	// OK admits.
	OK Code = iota + 1
	// OverLimit denies (for a descriptor: it is over its limit).
	OverLimit
)

// Result is the answer to a Request.
type Result struct {
	// Statuses has one status per descriptor, in request order.
	Statuses []Status
	// Code is the overall answer: OverLimit when a limit denied, unless the
	// engine is in shadow mode (WithShadowMode), which answers OK.
	Code Code
	// Denied reports that a limit denied the request, shadow mode or not:
	// the headers describe the denying descriptor then (Closest).
	Denied bool
}

// Status is the answer for one descriptor.
type Status struct {
	Code Code
	// Rule is the limit that reports the descriptor: the one that denied,
	// else the one with the least remaining. Nil when no limit applies:
	// an unmatched descriptor, an unknown domain, an unlimited one.
	Rule *config.Rule
	// Unlimited marks a descriptor whose limit is unlimited: never counted,
	// reported with the most remaining there is (the reference's
	// MaxUint32).
	Unlimited bool
	// Refund marks a descriptor with NegativeHits: its hits were given
	// back; it is OK with its limit and reports nothing remaining nor a
	// reset (the store does not tell them without another round trip).
	Refund bool
	// Remaining is what the descriptor could still spend (0 when over).
	Remaining uint32
	// UntilReset is the time after which the denied request would be
	// admitted, or, when admitted, the time until the key is back to a full,
	// untouched state (for a fixed window, its window's end). It is in
	// whole seconds, rounded up, for limits of a second or more.
	UntilReset time.Duration
	// HasReset is false when the protocols report no reset: a quota_mode
	// descriptor over its limit (as the reference's), a refund, a
	// descriptor with no limit. The headers still tell UntilReset.
	HasReset bool

	m    config.Match // the descriptor's match
	hits int          // its cost
}

// Closest returns the index of the status that the RateLimit-* headers
// describe, as the reference picks it: the last OverLimit descriptor when
// denied, else the first limited descriptor with the least remaining; -1
// when no descriptor has a limit. Refunds are never picked.
func (r *Result) Closest(denied bool) int {
	best, over := -1, -1
	for i := range r.Statuses {
		st := &r.Statuses[i]
		if st.Rule == nil || st.Refund {
			continue
		}
		if st.Code == OverLimit {
			over = i
		}
		if best < 0 || st.Remaining < r.Statuses[best].Remaining {
			best = i
		}
	}
	if over >= 0 && denied {
		return over
	}
	return best
}

// RequestError is a request that cannot be decided as sent (gRPC
// InvalidArgument, HTTP 400): Field names the request field ("domain",
// "descriptors[2].limit", ...). It wraps a *BoundError for a value beyond
// a bound, and the store's sluice.ErrInvalidLimit or sluice.ErrInvalidKey
// for a limit or key the store refused.
type RequestError struct {
	Field string
	Msg   string
	Err   error
}

func (e *RequestError) Error() string { return e.Msg }

// Unwrap returns the error the request's problem came from, if any.
func (e *RequestError) Unwrap() error { return e.Err }

// StoreError is a store call that made no decision (gRPC Unavailable, or
// the context's code when the context ended; HTTP 503 or 504).
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return "store: " + e.Err.Error() }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

func invalid(field, msg string) error { return &RequestError{Field: field, Msg: msg} }

// storeError classifies the error of a store call: a limit or key the
// store refused is the request's fault, anything else the store's.
func storeError(err error) error {
	if errors.Is(err, sluice.ErrInvalidLimit) || errors.Is(err, sluice.ErrInvalidKey) {
		return &RequestError{Msg: err.Error(), Err: err}
	}
	return &StoreError{Err: err}
}

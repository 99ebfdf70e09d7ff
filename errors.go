package sluice

import "errors"

// LimitError reports the invalid field of a Limit (Limit.Validate,
// ParseAlgorithm). It wraps ErrInvalidLimit.
type LimitError struct {
	Field string // "Algorithm", "Rate", "Period" or "Burst"
	Msg   string // names the field and the offending value
}

func (e *LimitError) Error() string { return ErrInvalidLimit.Error() + ": " + e.Msg }

// Unwrap returns ErrInvalidLimit.
func (e *LimitError) Unwrap() error { return ErrInvalidLimit }

// Errors that callers match with errors.Is. Every error a store or the
// Limiter returns wraps one of them together with the offending value.
var (
	// ErrInvalidLimit reports a Limit that fails Validate: a *LimitError
	// wrapping it names the field.
	ErrInvalidLimit = errors.New("sluice: invalid limit")
	// ErrInvalidKey reports an empty key or one longer than MaxKeyLen bytes.
	ErrInvalidKey = errors.New("sluice: invalid key")
	// ErrInvalidCost reports a negative n.
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrExceedsCapacity reports an n larger than the limit can ever admit
	// at once (Rate, or Burst for the bucket algorithms): waiting would never
	// help, so no RetryAfter is given.
	ErrExceedsCapacity = errors.New("sluice: cost exceeds capacity")
	// ErrWouldExceedDeadline is returned by Wait when the context's deadline
	// comes before the time at which the request could be admitted.
	ErrWouldExceedDeadline = errors.New("sluice: wait would exceed context deadline")
	// ErrClosed is returned by a store or Limiter after Close.
	ErrClosed = errors.New("sluice: closed")
	// ErrMultiUnsupported is returned by Limiter.AllowMulti when the store
	// cannot decide several limits atomically.
	ErrMultiUnsupported = errors.New("sluice: store does not support AllowMulti")
)

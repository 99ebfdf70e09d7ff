package sluice

import "errors"

// LimitError reports the invalid field of a request: of its Limit
// (Limit.Validate, ParseAlgorithm, ParseFailureMode), its key or its cost.
// It wraps Err: ErrInvalidLimit (the default, when Err is nil),
// ErrInvalidKey, ErrInvalidCost or ErrExceedsCapacity.
type LimitError struct {
	// Field is "Algorithm", "Rate", "Period", "Burst", "FailureMode" or
	// "Counting" for the limit, "Key" for the key and "N" for the cost;
	// "Max", "TTL" or "Holder" for a concurrency limit and its holder.
	Field string
	// Reason names the field and the offending value.
	Reason string
	// Err is the sentinel the error wraps; nil means ErrInvalidLimit.
	Err error
}

func (e *LimitError) Error() string { return e.Unwrap().Error() + ": " + e.Reason }

// Unwrap returns the sentinel: Err, or ErrInvalidLimit when Err is nil.
func (e *LimitError) Unwrap() error {
	if e.Err == nil {
		return ErrInvalidLimit
	}
	return e.Err
}

// Errors that callers match with errors.Is. Every error a store or the
// Limiter returns wraps one of them together with the offending value.
var (
	// ErrInvalidLimit reports a Limit that fails Validate. Every invalid
	// request is reported by a *LimitError, which names the field and
	// wraps this or one of the next three.
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
	// ErrMultiUnsupported is returned by the AllowMulti of a store that
	// cannot decide several limits atomically (Unsupported's, a lifted
	// store that is not a MultiStore, a wrapper over one), and so by
	// Limiter.AllowMulti.
	ErrMultiUnsupported = errors.New("sluice: store does not support AllowMulti")
	// ErrNoDecision is wrapped by the error of a call made under the
	// failure mode FailError while the store that counts could not answer
	// (a failover store's breaker open, a call that failed or timed out):
	// no decision was made and nothing was counted by this call, and the
	// caller's own policy decides (serve, refuse, retry). The error also
	// wraps the failure's cause.
	ErrNoDecision = errors.New("sluice: no decision")
)

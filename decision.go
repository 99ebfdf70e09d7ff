package sluice

import (
	"context"
	"fmt"
	"time"
)

// Decision reports one rate-limit step. A denial is a Decision with Allowed
// false, never an error.
type Decision struct {
	Allowed bool
	// Degraded is true when the decision was made by the limit's
	// FailureMode, without the answer of the store that counts (a
	// failover.Store while its shared store does not answer): Remaining,
	// RetryAfter and ResetAfter are then those of the failure mode, not of
	// the key's shared state.
	Degraded bool
	Limit    Limit
	// Remaining is what could still be admitted now.
	Remaining int
	// RetryAfter is 0 when Allowed; otherwise the exact wait after which
	// the same request would be admitted, absent other traffic.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to a full, untouched state.
	ResetAfter time.Duration
}

// Store applies one algorithm step for key atomically.
// A denial is a Decision, never an error; err means no decision was made.
//
// AllowN is all that New needs, and all that a store must have; a store
// with more capabilities is a FullStore (see Unsupported and Lift).
type Store interface {
	AllowN(ctx context.Context, key string, lim Limit, n int) (Decision, error)
}

// Request is one key, limit and cost of an AllowMulti call.
type Request struct {
	Key   string
	Limit Limit
	N     int
}

// MultiStore is a Store that decides several requests all-or-nothing: either
// every request is admitted and counted, or none is counted. It is part of
// FullStore; a store that cannot returns an error wrapping
// ErrMultiUnsupported (Unsupported's does).
//
// Requests on the same state (key, algorithm and period) are decided one
// after the other: each after the earlier ones that were admitted, which it
// sees as counted; a denied request is not counted for those after it, and
// a request of cost 0 is never denied.
//
// The returned decisions are in request order. When any request is denied,
// every decision has Allowed false; the ones that blocked carry their
// RetryAfter, the others RetryAfter 0 and the Remaining and ResetAfter of a
// peek at their state as it is (nothing of the call counted).
type MultiStore interface {
	Store
	AllowMulti(ctx context.Context, reqs []Request) ([]Decision, error)
}

// ValidateKey reports an empty key or one longer than MaxKeyLen bytes. Keys
// are otherwise opaque bytes: any byte, UTF-8 or not, is allowed.
func ValidateKey(key string) error {
	if key != "" && len(key) <= MaxKeyLen {
		return nil // inlined: a valid key costs no call
	}
	return keyError(key)
}

func keyError(key string) error {
	if key == "" {
		return &LimitError{Field: "Key", Reason: "key is empty", Err: ErrInvalidKey}
	}
	return &LimitError{Field: "Key", Reason: fmt.Sprintf("key is %d bytes, longer than %d", len(key), MaxKeyLen), Err: ErrInvalidKey}
}

// CombineRetry returns the longest RetryAfter of ds: the wait after which a
// denied AllowMulti could be admitted, absent other traffic.
func CombineRetry(ds []Decision) time.Duration {
	var r time.Duration
	for _, d := range ds {
		r = max(r, d.RetryAfter)
	}
	return r
}

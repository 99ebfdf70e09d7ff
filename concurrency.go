package sluice

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// ConcurrencyLimit bounds how many at once: at most Max permits of a key
// are held at any instant, across every process that shares the store. A
// permit lives for TTL: one that is neither released nor extended within
// its TTL (its process died, or hung) is freed when the TTL ends, never
// later, so that a crash costs at most one TTL of one slot.
type ConcurrencyLimit struct {
	Max int           // permits held at once, 1 to MaxPermits
	TTL time.Duration // a permit's time to live, MinTTL to MaxTTL, a whole number of milliseconds
	// Lease is TTL's former name, used when TTL is 0 (Normalize).
	//
	// Deprecated: set TTL.
	Lease time.Duration
}

// Bounds of a ConcurrencyLimit and of a holder's id.
const (
	// MaxPermits bounds ConcurrencyLimit.Max: a store keeps one entry per
	// held permit, and each acquire trims the expired ones.
	MaxPermits = 10000
	// MinTTL and MaxTTL bound ConcurrencyLimit.TTL.
	MinTTL = 10 * time.Millisecond
	MaxTTL = 24 * time.Hour
	// MaxHolderLen bounds a permit's holder id, in bytes.
	MaxHolderLen = 128
)

// Former names of MinTTL and MaxTTL.
//
// Deprecated: use MinTTL and MaxTTL.
const (
	MinLease = MinTTL
	MaxLease = MaxTTL
)

// Normalize returns c with its deprecated Lease moved to TTL when TTL is
// 0, and Lease cleared: the form every store decides on. Stores and the
// Limiter call it first, so that a limit written with Lease works as one
// written with TTL.
func (c ConcurrencyLimit) Normalize() ConcurrencyLimit {
	if c.TTL == 0 {
		c.TTL = c.Lease
	}
	c.Lease = 0
	return c
}

// Validate reports the first invalid field of c, normalized, as a
// *LimitError ("Max" or "TTL"), which wraps ErrInvalidLimit.
func (c ConcurrencyLimit) Validate() error {
	c = c.Normalize()
	bad := func(field, format string, args ...any) error {
		return &LimitError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Max < 1 || c.Max > MaxPermits:
		return bad("Max", "Max %d must be within [1, %d]", c.Max, MaxPermits)
	case c.TTL < MinTTL || c.TTL > MaxTTL:
		return bad("TTL", "TTL %v must be within [%v, %v]", c.TTL, MinTTL, MaxTTL)
	case c.TTL%time.Millisecond != 0:
		return bad("TTL", "TTL %v must be a whole number of milliseconds", c.TTL)
	}
	return nil
}

// String describes c, as in "at most 8 at once (ttl 30s)".
func (c ConcurrencyLimit) String() string {
	return fmt.Sprintf("at most %d at once (ttl %v)", c.Max, c.Normalize().TTL)
}

// PermitDecision is the answer to an Acquire or an Extend. A denial is a
// PermitDecision with Acquired false, never an error.
type PermitDecision struct {
	// Acquired reports that the holder holds a permit now, until
	// Expires.
	Acquired bool
	// Degraded reports a decision made by a failure mode while the shared
	// store did not answer (see Decision.Degraded).
	Degraded bool
	// Held is how many permits of the key are held after the call,
	// Acquired's included.
	Held int
	// Limit is the limit decided.
	Limit ConcurrencyLimit
	// Expires is when the permit's TTL ends, on the store's clock: the
	// holder must Release or Extend before. Zero when not Acquired.
	Expires time.Time
	// RetryAfter is, on a denial, how long until the earliest held
	// permit's TTL ends: the latest a slot can free, since a release may
	// free one sooner. Zero when Acquired.
	RetryAfter time.Duration
}

// Semaphore is a store of concurrency limits: permits with a TTL, held by
// named holders. Every operation is atomic in the store, on the store's
// clock; a holder id is the caller's choice, unique per permit (NewHolder
// makes one). It is part of FullStore; a store without concurrency limits
// returns an error wrapping ErrSemaphoreUnsupported from every method
// (Unsupported's do). A store normalizes lim (ConcurrencyLimit.Normalize)
// before it validates it.
type Semaphore interface {
	// Acquire takes a permit of key for holder when fewer than lim.Max
	// are held, expired permits not counted, held until the store's now
	// plus lim.TTL. Acquiring again with a holder that holds a permit of
	// the key renews it and holds one permit, not two.
	Acquire(ctx context.Context, key string, lim ConcurrencyLimit, holder string) (PermitDecision, error)
	// Release gives holder's permit of key back at once. Releasing a
	// permit that is not held (released already, or expired) is not an
	// error: its slot is free either way.
	Release(ctx context.Context, key string, holder string) error
	// Extend renews holder's permit of key to the store's now plus
	// lim.TTL, for work that runs longer than a TTL. When the permit is
	// no longer held (it expired, and its slot may be another's),
	// Extend returns a PermitDecision with Acquired false and an error
	// wrapping ErrPermitLost: the holder must stop, or acquire again.
	Extend(ctx context.Context, key string, lim ConcurrencyLimit, holder string) (PermitDecision, error)
}

// ErrPermitLost reports an Extend of a permit that is no longer held: its
// TTL ended before it was extended.
var ErrPermitLost = errors.New("sluice: permit lost: its TTL ended before it was extended")

// ValidateHolder reports an empty holder id, or one longer than
// MaxHolderLen, as a *LimitError on "Holder" wrapping ErrInvalidKey.
func ValidateHolder(holder string) error {
	if holder == "" || len(holder) > MaxHolderLen {
		return &LimitError{Field: "Holder", Reason: fmt.Sprintf("holder id of %d bytes: want 1 to %d", len(holder), MaxHolderLen), Err: ErrInvalidKey}
	}
	return nil
}

// NewHolder returns a new random holder id (32 hex digits), unique per
// permit for all practical purposes.
func NewHolder() string {
	var b [16]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

package sluice

import (
	"context"
	"errors"
)

// Resetter is a Store that can put a key back to untouched: an operator
// lifting a limit (a customer limited by mistake, a quota raised mid
// window). It is the shared store's state, so every process that decides
// through the store sees the reset at once.
//
// Reset forgets the state of key under lim's algorithm and period (the
// state AllowN counts on; the limit's Rate, Burst and Counting do not
// choose it): afterwards the key is as if it had never been asked for,
// a debt of a limit that counts every hit included, and its states under
// other algorithms or periods are untouched. A key with no state is reset
// already: Reset returns nil. key and lim are validated as AllowN
// validates them (a *LimitError naming the field), before any lock or
// call to a backend.
//
// To read a key's state without counting anything, call AllowN with n = 0:
// Remaining, RetryAfter and ResetAfter describe the state (a limit that
// counts every hit denies it while the key is in debt).
//
// It is part of FullStore. memstore, redisstore, tiered, failover and stack
// implement it; a store that cannot reset, and a wrapper over one, returns
// an error wrapping ErrResetUnsupported (Unsupported's does).
type Resetter interface {
	Store
	Reset(ctx context.Context, key string, lim Limit) error
}

// ErrResetUnsupported is returned by the Reset of a store that cannot
// reset (Unsupported's, a lifted store that is not a Resetter, a wrapper
// over one).
var ErrResetUnsupported = errors.New("sluice: store does not support Reset")

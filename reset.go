package sluice

import "context"

// Resetter is a Store that can put a key back to untouched: an operator
// lifting a limit (a customer limited by mistake, a quota raised mid
// window). It is the shared store's state, so every process that decides
// through the store sees the reset at once.
//
// Reset forgets the state of key under lim's algorithm and period (the
// state AllowN counts on; the limit's Rate and Burst do not matter):
// afterwards the key is as if it had never been asked for. A key with no
// state is reset already: Reset returns nil. The key is validated as
// AllowN validates it; the limit's Algorithm and Period must be valid.
type Resetter interface {
	Store
	Reset(ctx context.Context, key string, lim Limit) error
}

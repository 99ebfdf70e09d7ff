//go:build hostiletest

// This file is compiled only with -tags hostiletest, by the hostile-client
// suite (service/hostile): it makes one path of the store panic so that the
// suite can prove a panic in a handler is recovered (HTTP 500, gRPC
// Internal) and the process keeps answering.

package main

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice"
)

// hostilePanicKey is the text that makes the wrapped store panic when a key
// contains it.
const hostilePanicKey = "hostile-panic"

func init() {
	testStoreWrap = func(s sluice.Store) sluice.Store { return panicStore{sluice.Lift(s)} }
}

// panicStore panics, before calling its store, on a key containing
// hostilePanicKey, in AllowN and AllowMulti; every other call passes to its
// store, so that ShouldRateLimit decides as it does without the hook.
type panicStore struct{ sluice.FullStore }

func (p panicStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if strings.Contains(key, hostilePanicKey) {
		panic("hostiletest: store called with key " + key)
	}
	return p.FullStore.AllowN(ctx, key, lim, n)
}

func (p panicStore) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	for _, r := range reqs {
		if strings.Contains(r.Key, hostilePanicKey) {
			panic("hostiletest: store called with key " + r.Key)
		}
	}
	return p.FullStore.AllowMulti(ctx, reqs)
}

// Close does nothing: serve closes the store below.
func (p panicStore) Close() error { return nil }

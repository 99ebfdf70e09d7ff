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
	testStoreWrap = func(s sluice.Store) sluice.Store {
		if m, ok := s.(sluice.MultiStore); ok {
			pm := panicMultiStore{panicStore{s}, m}
			if sem, ok := s.(sluice.Semaphore); ok {
				return panicSemStore{pm, sem}
			}
			return pm
		}
		return panicStore{s}
	}
}

// panicStore panics, before calling its store, on a key containing
// hostilePanicKey.
type panicStore struct{ sluice.Store }

func (p panicStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if strings.Contains(key, hostilePanicKey) {
		panic("hostiletest: store called with key " + key)
	}
	return p.Store.AllowN(ctx, key, lim, n)
}

// panicMultiStore keeps a MultiStore one, so that ShouldRateLimit decides
// all-or-nothing as it does without the hook.
type panicMultiStore struct {
	panicStore
	multi sluice.MultiStore
}

// panicSemStore keeps a Semaphore one too, so that the permit endpoints
// answer as they do without the hook.
type panicSemStore struct {
	panicMultiStore
	sluice.Semaphore
}

func (p panicMultiStore) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	for _, r := range reqs {
		if strings.Contains(r.Key, hostilePanicKey) {
			panic("hostiletest: store called with key " + r.Key)
		}
	}
	return p.multi.AllowMulti(ctx, reqs)
}

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
		m, multi := s.(sluice.MultiStore)
		sem, permits := s.(sluice.Semaphore)
		switch {
		case multi && permits:
			return panicMultiSemStore{panicMultiStore{panicStore{s}, m}, sem}
		case multi:
			return panicMultiStore{panicStore{s}, m}
		case permits:
			return panicSemStore{panicStore{s}, sem}
		}
		return panicStore{s}
	}
}

// panicSemStore and panicMultiSemStore keep a Semaphore one, so that the
// permit endpoints work as they do without the hook.
type (
	panicSemStore struct {
		panicStore
		sluice.Semaphore
	}
	panicMultiSemStore struct {
		panicMultiStore
		sluice.Semaphore
	}
)

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

func (p panicMultiStore) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	for _, r := range reqs {
		if strings.Contains(r.Key, hostilePanicKey) {
			panic("hostiletest: store called with key " + r.Key)
		}
	}
	return p.multi.AllowMulti(ctx, reqs)
}

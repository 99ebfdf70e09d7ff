package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/tiered"
)

// testStoreWrap, when not nil, wraps the store that serve decides through
// (after failover and tiered): a test hook, set only by test builds (a file
// under the hostiletest build tag, or a test of this package). When the
// wrapper is an io.Closer, its Close runs first when serve closes the store.
var testStoreWrap func(sluice.Store) sluice.Store

// wrapForTest applies testStoreWrap to st.
func (st *storeSet) wrapForTest() {
	if testStoreWrap == nil {
		return
	}
	inner := st.store
	st.store = testStoreWrap(inner)
	st.waitBound = -1 // the wrapper may wait as it likes
	if c, ok := st.store.(io.Closer); ok && st.store != inner {
		innerClose := st.close
		st.close = func() { c.Close(); innerClose() }
	}
}

// openStore returns the memory store, or the shared Redis store behind
// failover when --redis is set: a deadline on every call, a breaker, and the
// --failure-mode policy (a rule's failure_mode overrides it per call).
func openStore(ctx context.Context, f serveFlags, m *server.Metrics, log *slog.Logger) (*storeSet, error) {
	if f.redis.url == "" {
		ms := memstore.New(memstore.WithMaxKeys(f.limits.memoryMaxKeys), memstore.WithOnEvict(m.MemoryEvicted))
		return &storeSet{store: ms, name: "memory", close: func() { ms.Close() }}, nil
	}
	var ropts []redisstore.Option
	tc, err := f.tls.redis(log)
	if err != nil {
		return nil, fmt.Errorf("--redis-tls-*: %w", err)
	}
	if tc != nil {
		ropts = append(ropts, redisstore.WithTLSConfig(tc))
	}
	octx, cancel := context.WithTimeout(ctx, connectTimeout)
	rs, err := redisstore.Open(octx, f.redis.url, ropts...)
	cancel()
	var raw redisLayer = rs
	var down error
	if err != nil {
		if f.redis.required || !unreachable(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("--redis: %w", err)
		}
		// Serve by the failure policy, breaker open, until Redis answers.
		log.Warn("redis unreachable at start: deciding by the failure policy and connecting in the background (--redis-required exits instead)", "err", err)
		raw, down = newPendingStore(f.redis.url, ropts, log), err
	}
	policy := failover.FailClosed
	if f.redis.failover.mode == sluice.FailOpen {
		policy = failover.FailOpen
	}
	opts := []failover.Option{
		failover.WithDefaultPolicy(policy),
		failover.WithTimeout(f.redis.timeout),
		failover.WithObserver(m),
		failover.WithLogger(log),
	}
	if f.redis.failover.replicas > 0 {
		opts = append(opts, failover.WithReplicas(f.redis.failover.replicas))
	}
	if f.limits.memoryMaxKeys > 0 {
		opts = append(opts, failover.WithLocalMaxKeys(f.limits.memoryMaxKeys))
	}
	if down != nil {
		opts = append(opts, failover.WithStartOpen(fmt.Errorf("%w: %w", failover.ErrUnavailable, down)))
	}
	var shared sluice.Store = raw
	closeShared := func() { raw.Close() }
	name := "redis (failover " + policy.String()
	if f.redis.tiered.on {
		topts := []tiered.Option{tiered.WithLogger(log)}
		if f.redis.tiered.leaseMax > 0 {
			topts = append(topts, tiered.WithLeases(f.redis.tiered.leaseMax, f.redis.tiered.leaseFraction, f.redis.tiered.leaseLifetime))
			if f.redis.tiered.leaseRefresh > 0 {
				topts = append(topts, tiered.WithRefreshAhead(f.redis.tiered.leaseRefresh))
			}
			name += ", tiered with leases"
		} else {
			name += ", tiered"
		}
		ts := tiered.New(raw, topts...)
		shared = ts
		closeShared = func() { ts.Close(); raw.Close() }
	}
	// The breaker goes outside the local tier: lease spends and cached
	// denials stay local, and a failing Redis opens the breaker.
	fs := failover.New(shared, opts...)
	return &storeSet{
		store:     fs,
		name:      name + ")",
		ready:     fs.Ready,
		close:     func() { fs.Close(); closeShared() },
		waitBound: f.redis.timeout,
	}, nil
}

// redisLayer is the Redis store at the bottom: *redisstore.Store, or a
// pendingStore while Redis has not been reached.
type redisLayer interface {
	sluice.Store
	sluice.MultiStore
	sluice.Leaser
	Close() error
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/stack"
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

// openStore returns the memory store, or, when --redis is set, the shared
// Redis store in the stack of package stack: failover (a deadline on every
// call, a breaker, and the --failure-mode default, which a rule's
// failure_mode overrides), and with --tiered the local tier in front; or,
// with --remote-store, the same stack over another sluice's store API.
func openStore(ctx context.Context, f serveFlags, m *metrics.Metrics, log *slog.Logger) (*storeSet, error) {
	if f.redis.remote.addr != "" {
		return openRemote(ctx, f, m, log)
	}
	if f.redis.url == "" {
		ms := memstore.New(memstore.WithMaxKeys(f.limits.memoryMaxKeys), memstore.WithOnEvict(m.MemoryEvicted))
		return &storeSet{store: ms, name: "memory", close: func() { ms.Close() }}, nil
	}
	ropts := []redisstore.Option{redisstore.WithPrefix(f.redis.keyPrefix)}
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
	var raw sluice.FullStore = rs
	var down error
	if err != nil {
		if f.redis.required || !redisstore.Unreachable(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("--redis: %w", err)
		}
		// Serve by the failure policy, breaker open, until Redis answers.
		log.Warn("redis unreachable at start: deciding by the failure policy and connecting in the background (--redis-required exits instead)", "err", err)
		later, lerr := redisstore.OpenLater(f.redis.url, append(ropts, redisstore.WithLogger(log))...)
		if lerr != nil {
			return nil, fmt.Errorf("--redis: %w", lerr)
		}
		raw, down = later, err
	}
	return stackOver(raw, down, f.redis.timeout, "redis", f, m, log)
}

// stackOver returns the stack over raw, a shared store whose calls get
// timeout; down is why it did not answer at start (nil when it did). The
// stack's Close closes raw too.
func stackOver(raw sluice.FullStore, down error, timeout time.Duration, name string, f serveFlags, m *metrics.Metrics, log *slog.Logger) (*storeSet, error) {
	mode := f.redis.failover.mode
	fopts := []failover.Option{
		failover.WithDefaultMode(mode),
		failover.WithTimeout(timeout),
		failover.WithObserver(m),
		failover.WithLogger(log),
	}
	if f.redis.failover.replicas > 0 {
		fopts = append(fopts, failover.WithReplicas(f.redis.failover.replicas))
	}
	if f.limits.memoryMaxKeys > 0 {
		fopts = append(fopts, failover.WithLocalMaxKeys(f.limits.memoryMaxKeys))
	}
	if down != nil {
		fopts = append(fopts, failover.WithStartOpen(fmt.Errorf("%w: %w", failover.ErrUnavailable, down)))
	}
	opts := []stack.Option{stack.WithFailover(fopts...)}
	name += " (failover fail_" + mode.String()
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
		opts = append(opts, stack.WithTiered(topts...))
	}
	// tiered(failover(redis)): lease spends and cached denials stay local,
	// every Redis call has a deadline, and a failing Redis opens the breaker.
	st, err := stack.New(raw, opts...)
	if err != nil {
		raw.Close()
		return nil, err
	}
	return &storeSet{
		store:     st,
		name:      name + ")",
		ready:     st.Ready,
		close:     func() { st.Close(); raw.Close() },
		waitBound: timeout,
	}, nil
}

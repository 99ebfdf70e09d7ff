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
// failure_mode overrides), and with --tiered the local tier in front.
func openStore(ctx context.Context, f serveFlags, m *server.Metrics, log *slog.Logger) (*storeSet, error) {
	if f.redis == "" {
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
	rs, err := redisstore.Open(octx, f.redis, ropts...)
	cancel()
	var raw redisLayer = rs
	var down error
	if err != nil {
		if f.redisRequired || !unreachable(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("--redis: %w", err)
		}
		// Serve by the failure policy, breaker open, until Redis answers.
		log.Warn("redis unreachable at start: deciding by the failure policy and connecting in the background (--redis-required exits instead)", "err", err)
		raw, down = newPendingStore(f.redis, ropts, log), err
	}
	mode := sluice.FailClosed
	if f.failureMode == "open" {
		mode = sluice.FailOpen
	}
	fopts := []failover.Option{
		failover.WithDefaultMode(mode),
		failover.WithTimeout(f.redisTimeout),
		failover.WithObserver(m),
		failover.WithLogger(log),
	}
	if f.replicas > 0 {
		fopts = append(fopts, failover.WithReplicas(f.replicas))
	}
	if f.limits.memoryMaxKeys > 0 {
		fopts = append(fopts, failover.WithLocalMaxKeys(f.limits.memoryMaxKeys))
	}
	if down != nil {
		fopts = append(fopts, failover.WithStartOpen(fmt.Errorf("%w: %w", failover.ErrUnavailable, down)))
	}
	opts := []stack.Option{stack.WithFailover(fopts...)}
	name := "redis (failover fail_" + mode.String()
	if f.tiered {
		topts := []tiered.Option{tiered.WithLogger(log)}
		if f.leaseMax > 0 {
			topts = append(topts, tiered.WithLeases(f.leaseMax, f.leaseFraction, f.leaseLifetime))
			if f.leaseRefresh > 0 {
				topts = append(topts, tiered.WithRefreshAhead(f.leaseRefresh))
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
		waitBound: f.redisTimeout,
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

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/route"
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
	if g, ok := st.store.(sluice.Granter); ok && st.granter != nil {
		st.granter = g // the store API's grants go through it too
	}
	if c, ok := st.store.(io.Closer); ok && st.store != inner {
		innerClose := st.close
		st.close = func() { c.Close(); innerClose() }
	}
}

// openStore returns the memory store, or, when --redis (or --memcache, or
// --remote-store: another sluice's store API) is set, the shared store in the stack of package stack: failover (a
// deadline on every call, a breaker, and the --failure-mode default, which
// a rule's failure_mode overrides), with --redis-persecond a second Redis
// (with its own failover) for the limits of a second or less, and with
// --tiered the local tier in front. With stats, the Redis clients'
// connections are counted as the reference's redis_pool (and
// redis_per_second_pool) statistics.
func openStore(ctx context.Context, f serveFlags, m *metrics.Metrics, stats *refStats, log *slog.Logger) (*storeSet, error) {
	if !f.redis.shared() {
		ms := memstore.New(memstore.WithMaxKeys(f.limits.memoryMaxKeys), memstore.WithOnEvict(m.MemoryEvicted))
		return &storeSet{store: ms, granter: ms, name: "memory", close: func() { ms.Close() }}, nil
	}
	reg := &f.redis.region
	mode := f.redis.failover.mode
	timeout := f.redis.timeout
	if f.redis.remote.addr != "" {
		timeout = f.redis.remote.timeout
	}
	fopts := []failover.Option{
		failover.WithDefaultMode(mode),
		failover.WithTimeout(timeout),
		failover.WithObserver(m),
		failover.WithLogger(log),
	}
	if reg.on() {
		// The calls that --region passes on cross the WAN: their deadline
		// follows the round trip, as the grants' does.
		fopts[1] = failover.WithAdaptiveTimeout(reg.timeoutMin, reg.timeoutMax)
		timeout = reg.timeoutMax
	}
	if f.redis.failover.replicas > 0 {
		fopts = append(fopts, failover.WithReplicas(f.redis.failover.replicas))
	}
	if f.limits.memoryMaxKeys > 0 {
		fopts = append(fopts, failover.WithLocalMaxKeys(f.limits.memoryMaxKeys))
	}
	var (
		raw      sluice.FullStore
		down     error
		closeRaw func()
		name     string
		opts     []stack.Option
	)
	switch {
	case f.redis.remote.addr != "":
		rs, rdown, err := openRemote(ctx, &f.redis.remote, log)
		if err != nil {
			return nil, err
		}
		if err := checkGrants(ctx, reg, f.redis.remote.addr, rs, rdown); err != nil {
			rs.Close()
			return nil, err
		}
		raw, down, closeRaw = rs, rdown, func() { rs.Close() }
		name = "remote " + f.redis.remote.addr + " (failover fail_" + mode.String()
	case f.redis.memcache.set():
		_, refKeys := f.referenceKeys()
		ms, mdown, err := openMemcache(ctx, &f.redis.memcache, f.redis.keyPrefix, f.redis.timeout, refKeys, log)
		if err != nil {
			return nil, err
		}
		raw, down, closeRaw = ms, mdown, func() { ms.Close() }
		name = "memcache (failover fail_" + mode.String()
	default:
		ropts := []redisstore.Option{redisstore.WithPrefix(f.redis.keyPrefix)}
		tc, err := f.tls.redis(log)
		if err != nil {
			return nil, fmt.Errorf("--redis-tls-*: %w", err)
		}
		if tc != nil {
			ropts = append(ropts, redisstore.WithTLSConfig(tc))
		}
		mainOpts := ropts
		if stats != nil {
			p := stats.Pool("redis_pool")
			mainOpts = append(slices.Clone(ropts), redisstore.WithConnObserver(p.Opened, p.Closed))
		}
		rs, rdown, err := openRedis(ctx, "--redis", f.redis.url, f.redis.required, mainOpts, log)
		if err != nil {
			return nil, err
		}
		raw, down, closeRaw = rs, rdown, func() { rs.Close() }
		name = "redis (failover fail_" + mode.String()
		if f.redis.perSecond != "" {
			psROpts := ropts
			if stats != nil {
				p := stats.Pool("redis_per_second_pool")
				psROpts = append(slices.Clone(ropts), redisstore.WithConnObserver(p.Opened, p.Closed))
			}
			rs2, down2, err := openRedis(ctx, "--redis-persecond", f.redis.perSecond, f.redis.required, psROpts, log)
			if err != nil {
				rs.Close()
				return nil, err
			}
			closeRaw = func() { rs.Close(); rs2.Close() }
			psOpts := withStartOpen(fopts, down2)
			if f.redis.psTimeout > 0 {
				psOpts = append(slices.Clone(psOpts), failover.WithTimeout(f.redis.psTimeout))
			}
			opts = append(opts, stack.WithRoute(rs2, route.PerSecond, psOpts...))
			name += ", per-second limits in --redis-persecond"
		}
	}
	opts = append(opts, stack.WithFailover(withStartOpen(fopts, down)...))
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
	// tiered(failover(shared)): lease spends and cached denials stay local,
	// every shared call has a deadline, and a failing store opens the
	// breaker.
	st, err := stack.New(raw, opts...)
	if err != nil {
		closeRaw()
		return nil, err
	}
	// The store API's grants: the shared store's own, unless the service's
	// per-second limits are counted in another Redis.
	g, _ := raw.(sluice.Granter)
	if f.redis.perSecond != "" {
		g = nil
	}
	if reg.on() {
		if g == nil {
			st.Close()
			closeRaw()
			return nil, fmt.Errorf("--region: %v cannot grant", raw)
		}
		rmode := mode
		if rmode == sluice.FailError {
			rmode = sluice.FailClosed // refused by the flags' validation
		}
		rs, err := openRegion(reg, st, g, rmode, f.limits.memoryMaxKeys, m.Registry(), log)
		if err != nil {
			st.Close()
			closeRaw()
			return nil, err
		}
		return &storeSet{
			store:     rs,
			name:      fmt.Sprintf("region %q, granted by %s)", reg.holder, name),
			ready:     st.Ready,
			close:     func() { rs.Close(); st.Close(); closeRaw() },
			region:    rs,
			waitBound: timeout,
		}, nil
	}
	return &storeSet{
		granter:   g,
		store:     st,
		name:      name + ")",
		ready:     st.Ready,
		close:     func() { st.Close(); closeRaw() },
		waitBound: timeout,
	}, nil
}

// openRedis connects to the Redis at url (flagName's). When it cannot be
// reached and required is false, it returns a store that connects in the
// background (redisstore.OpenLater) and the error, for failover to start
// with its breaker open.
func openRedis(ctx context.Context, flagName, url string, required bool, ropts []redisstore.Option, log *slog.Logger) (st sluice.FullStore, down, err error) {
	octx, cancel := context.WithTimeout(ctx, connectTimeout)
	rs, err := redisstore.Open(octx, url, ropts...)
	cancel()
	if err == nil {
		return rs, nil, nil
	}
	if required || !redisstore.Unreachable(err) || ctx.Err() != nil {
		return nil, nil, fmt.Errorf("%s: %w", flagName, err)
	}
	// Serve by the failure policy, breaker open, until Redis answers.
	log.Warn("redis unreachable at start: deciding by the failure policy and connecting in the background (--redis-required exits instead)", "flag", flagName, "err", err)
	later, lerr := redisstore.OpenLater(url, append(ropts, redisstore.WithLogger(log))...)
	if lerr != nil {
		return nil, nil, fmt.Errorf("%s: %w", flagName, lerr)
	}
	return later, err, nil
}

// withStartOpen is opts, with the breaker open at start when the store
// was down (down not nil).
func withStartOpen(opts []failover.Option, down error) []failover.Option {
	if down == nil {
		return opts
	}
	return append(slices.Clone(opts), failover.WithStartOpen(fmt.Errorf("%w: %w", failover.ErrUnavailable, down)))
}

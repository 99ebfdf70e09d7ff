package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/tiered"
)

// testStoreWrap, when set (by a file built only for tests), wraps the store
// that serve decides through.
var testStoreWrap func(sluice.Store) sluice.Store

// openStore returns the memory store, or the shared Redis store behind
// failover when --redis is set: a deadline on every call, a breaker, and the
// --failure-mode policy (a rule's failure_mode overrides it per call).
func openStore(ctx context.Context, f serveFlags, m *server.Metrics, log *slog.Logger) (set *storeSet, err error) {
	defer func() { set = wrapForTest(set) }()
	if f.redis == "" {
		ms := memstore.New()
		return &storeSet{store: ms, name: "memory", close: func() { ms.Close() }}, nil
	}
	rs, err := redisstore.Open(ctx, f.redis)
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	policy := failover.FailClosed
	if f.failureMode == "open" {
		policy = failover.FailOpen
	}
	opts := []failover.Option{
		failover.WithDefaultPolicy(policy),
		failover.WithTimeout(f.redisTimeout),
		failover.WithObserver(m),
		failover.WithLogger(log),
	}
	if f.replicas > 0 {
		opts = append(opts, failover.WithReplicas(f.replicas))
	}
	var shared sluice.Store = rs
	closeShared := func() { rs.Close() }
	name := "redis (failover " + policy.String()
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
		ts := tiered.New(rs, topts...)
		shared = ts
		closeShared = func() { ts.Close(); rs.Close() }
	}
	// The breaker goes outside the local tier: lease spends and cached
	// denials stay local, and a failing Redis opens the breaker.
	fs := failover.New(shared, opts...)
	return &storeSet{
		store: fs,
		name:  name + ")",
		ready: fs.Ready,
		close: func() { fs.Close(); closeShared() },
	}, nil
}

func wrapForTest(set *storeSet) *storeSet {
	if set != nil && testStoreWrap != nil {
		set.store = testStoreWrap(set.store)
	}
	return set
}

package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// MaxLocalCacheKeys bounds WithLocalCache's keys.
const MaxLocalCacheKeys = 1 << 20

// localCache is envoyproxy/ratelimit's local cache of over-limit keys
// (WithLocalCache): a fixed window counting every hit that denied is
// remembered until the window ends, and its next requests in the window
// are denied without a store call.
type localCache struct {
	max int

	mu        sync.Mutex
	m         map[cacheKey]int64 // the window's end, in µs of the engine's clock
	lastSweep int64

	hits, misses atomic.Int64
}

type cacheKey struct {
	key    string
	period time.Duration
	start  int64 // the window's start, µs
}

// LocalCacheStats are the counts of the local cache of over-limit keys.
type LocalCacheStats struct {
	// Entries is the keys held, Hits the lookups that found their key
	// (each a limit denied without a store call), Misses the others.
	Entries, Hits, Misses int64
}

// WithLocalCache keeps envoyproxy/ratelimit's local cache of over-limit
// keys (its LOCAL_CACHE_SIZE_IN_BYTES), holding at most maxKeys keys
// (1 to MaxLocalCacheKeys; another value leaves it off): when a fixed
// window that counts every hit denies, its key is remembered until
// the window ends, and until then each request on it is denied (remaining
// 0) without a store call, its hits counted in no store, as the reference
// does. Reports of such limits have LocalCache set. It applies to the
// requests whose enforced limits all count every hit (another limit that
// counts admitted hits must not count when one denies: such requests are
// decided by the store alone). shadow_mode and quota_mode limits are
// cached alike (a shadow_mode one still answers OK). A full cache
// remembers no new key until windows end.
func WithLocalCache(maxKeys int) Option {
	return func(e *Engine) {
		if maxKeys >= 1 && maxKeys <= MaxLocalCacheKeys {
			e.lc = &localCache{max: maxKeys, m: map[cacheKey]int64{}}
		}
	}
}

// LocalCacheStats returns the counts of WithLocalCache's cache (zero
// without it).
func (e *Engine) LocalCacheStats() LocalCacheStats {
	lc := e.lc
	if lc == nil {
		return LocalCacheStats{}
	}
	lc.mu.Lock()
	n := len(lc.m)
	lc.mu.Unlock()
	return LocalCacheStats{Entries: int64(n), Hits: lc.hits.Load(), Misses: lc.misses.Load()}
}

// cacheable reports whether c's denial is remembered: an enforced fixed
// window that counts every hit (not a requests_per_unit: 0 rule, which
// counts on a limit of its own).
func cacheable(c *check) bool {
	return c.lim.Counting == sluice.CountAll && c.lim.Algorithm == sluice.FixedWindow && !c.rule.Deny
}

// windowOf is the cache's key of c's window at now (µs).
func windowOf(c *check, now int64) cacheKey {
	p := c.lim.Period.Microseconds()
	return cacheKey{key: c.key, period: c.lim.Period, start: now + algo.WindowLeft(now, p) - p}
}

// decideCached decides the enforcing limits cs through the local cache,
// then the store (decideEnforced) for those the cache does not deny.
func (e *Engine) decideCached(ctx context.Context, sc *scratch, cs []check) (bool, error) {
	lc := e.lc
	if lc == nil || len(cs) == 0 {
		return e.decideEnforced(ctx, sc, cs)
	}
	for k := range cs {
		if !cacheable(&cs[k]) {
			return e.decideEnforced(ctx, sc, cs)
		}
	}
	µs := e.now().UnixMicro()
	hit := false
	for k := range cs {
		hit = lc.lookup(&cs[k], µs) || hit
	}
	if !hit {
		admitted, err := e.decideEnforced(ctx, sc, cs)
		if err == nil && !admitted {
			lc.remember(cs, µs)
		}
		return admitted, err
	}
	// The limits the cache did not deny are charged by the store, each
	// its hits (they all count every hit), and the request is denied.
	rest := make([]check, 0, len(cs))
	for k := range cs {
		if !cs[k].cached {
			rest = append(rest, cs[k])
		}
	}
	if _, err := e.decideEnforced(ctx, sc, rest); err != nil {
		return false, err
	}
	j := 0
	for k := range cs {
		if !cs[k].cached {
			cs[k] = rest[j]
			j++
		}
	}
	lc.remember(cs, µs)
	return false, nil
}

// lookup decides c from the cache: denied, until its window ends, when its
// window is cached.
func (lc *localCache) lookup(c *check, now int64) bool {
	lc.mu.Lock()
	end, ok := lc.m[windowOf(c, now)]
	lc.mu.Unlock()
	if !ok || end <= now {
		lc.misses.Add(1)
		return false
	}
	lc.hits.Add(1)
	left := time.Duration(end-now) * time.Microsecond
	c.d = sluice.Decision{Limit: c.lim, RetryAfter: left, ResetAfter: left}
	c.over, c.cached = true, true
	return true
}

// remember caches the limits of cs that the store denied, until their
// windows end (not a denial of a failure mode, which says nothing of the
// count).
func (lc *localCache) remember(cs []check, now int64) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for k := range cs {
		c := &cs[k]
		if !c.over || c.cached || !c.counted || c.d.Degraded {
			continue
		}
		w := windowOf(c, now)
		if _, ok := lc.m[w]; !ok && len(lc.m) >= lc.max {
			lc.sweep(now)
			if len(lc.m) >= lc.max {
				continue
			}
		}
		lc.m[w] = w.start + c.lim.Period.Microseconds()
	}
}

// sweep drops the keys whose windows have ended, at most once a second of
// the engine's clock (a cache full of live keys is not scanned on every
// denial). lc.mu is held.
func (lc *localCache) sweep(now int64) {
	if now-lc.lastSweep < time.Second.Microseconds() {
		return
	}
	lc.lastSweep = now
	for w, end := range lc.m {
		if end <= now {
			delete(lc.m, w)
		}
	}
}

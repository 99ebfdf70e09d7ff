package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// callCounter counts the requests of each key that reach its store.
type callCounter struct {
	sluice.FullStore
	mu   sync.Mutex
	keys map[string]int
}

func (c *callCounter) count(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[string]int{}
	}
	c.keys[key]++
}

func (c *callCounter) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	c.count(key)
	return c.FullStore.AllowN(ctx, key, lim, n)
}

func (c *callCounter) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	for _, rq := range reqs {
		c.count(rq.Key)
	}
	return c.FullStore.AllowMulti(ctx, reqs)
}

// With WithLocalCache, a fixed window counting every hit that denied is
// denied from the cache until its window ends, without a store call: its
// hits reach no store, and its reports say LocalCache with all hits over.
// The other limits of the request are still charged.
func TestLocalCache(t *testing.T) {
	e, clk, rec := newEngine(t, WithCounting(sluice.CountAll), WithLocalCache(10))
	calls := &callCounter{FullStore: e.store}
	e.store = calls
	for i := range 6 {
		decide(t, e, d("fw", "a", 1))
		if r := rec.take(); len(r) != 1 || r[0].LocalCache {
			t.Fatalf("hit %d: reports %+v, want one, not from the cache", i+1, r)
		}
	}
	// The 6th denied by the store (count 6): the next ones by the cache,
	// the other descriptor still charged.
	code, each := decide(t, e, d("fw", "a", 2), d("ten", "b", 3))
	if want := []got{{OverLimit, 0}, {OK, 7}}; code != OverLimit || each[0] != want[0] || each[1] != want[1] {
		t.Errorf("from the cache: %v %v, want OverLimit %v", code, each, want)
	}
	r := rec.take()
	if len(r) != 2 || !r[0].LocalCache || r[0].Over != 2 || r[0].Hits != 2 || r[1].LocalCache || r[1].Within != 3 {
		t.Errorf("reports %+v, want fw from the cache (2 over), ten charged (3 within)", r)
	}
	if n := calls.keys["t/fw=a"]; n != 6 {
		t.Errorf("the store was asked %d times for fw=a, want 6 (not from the cache)", n)
	}
	if st := e.LocalCacheStats(); st != (LocalCacheStats{Entries: 1, Hits: 1, Misses: 7}) {
		t.Errorf("LocalCacheStats() = %+v, want 1 entry, 1 hit, 7 misses", st)
	}
	// The next window asks the store again.
	clk.add(50 * time.Second)
	if code, each := decide(t, e, d("fw", "a", 1)); code != OK || each[0].Remaining != 4 {
		t.Errorf("next window: %v %v, want OK with 4 remaining", code, each)
	}
	if r := rec.take(); r[0].LocalCache {
		t.Errorf("next window: %+v, want the store's decision", r)
	}
}

// A request with a limit counting admitted hits is decided by the store
// alone: such a limit must not count when another denies.
func TestLocalCacheMixed(t *testing.T) {
	e, _, rec := newEngine(t, WithCounting(sluice.CountAll), WithLocalCache(10))
	for range 7 {
		decide(t, e, d("fw", "a", 1))
	}
	rec.take()
	if code, each := decide(t, e, d("fw", "a", 1), d("adm", "b", 1)); code != OverLimit || each[1] != (got{OverLimit, 5}) && each[1] != (got{OK, 5}) {
		t.Errorf("mixed: %v %v", code, each)
	}
	for _, r := range rec.take() {
		if r.LocalCache {
			t.Errorf("mixed: %+v from the cache, want the store's", r)
		}
	}
}

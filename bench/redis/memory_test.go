package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Memory targets, bytes per key in MEMORY USAGE after 100 admissions per
// key at 100/minute; the sliding log per entry.
var memoryTargets = map[string]float64{
	// A string key costs 40 bytes plus its name's allocation: 56 with a
	// name of at most 12 bytes, so 72 with the default "sluice:" prefix
	// (redisstore's TestMemoryUsage holds the same targets).
	"sluice-rueidis-gcra":                  72,
	"sluice-rueidis-fixed_window":          72,
	"sluice-rueidis-gcra-noprefix":         56,
	"sluice-rueidis-fixed_window-noprefix": 56,
	"sluice-rueidis-sliding_log":           20, // per entry
}

const (
	memKeys      = 100
	memPerKey    = 100
	memRate      = 100
	memPeriod    = time.Minute
	memWorkers   = 16
	memKeyPrefix = "mem:"
)

// memUsage is what memoryUsage measures, per key.
type memUsage struct {
	half, full float64 // bytes per key after memPerKey/2 and memPerKey decisions
	entries    float64 // ZSET entries per key after memPerKey (0: no ZSET)
}

// perEntry is the total cost of a log entry: bytes per key / entries.
func (m memUsage) perEntry() float64 {
	if m.entries == 0 {
		return 0
	}
	return m.full / m.entries
}

// marginal is the cost of one more entry: the growth from half to full.
func (m memUsage) marginal() float64 {
	if m.entries == 0 {
		return 0
	}
	return (m.full - m.half) / (m.entries / 2)
}

// memoryUsage fills memKeys keys with memPerKey decisions each, and
// measures the Redis bytes per key (every key the implementation wrote,
// summed with MEMORY USAGE ... SAMPLES 0) half way and at the end.
func memoryUsage(t *testing.T, s *server, im impl) memUsage {
	t.Helper()
	ctx := context.Background()
	s.flush(t)
	decide, done := im.setup(t, s)
	defer done()
	fill := func(rounds int) {
		work := make(chan string)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		for range memWorkers {
			wg.Go(func() {
				for key := range work {
					if err := decide(ctx, key); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
				}
			})
		}
		for range rounds {
			for k := range memKeys {
				work <- fmt.Sprintf("%s%d", memKeyPrefix, k)
			}
		}
		close(work)
		wg.Wait()
		if firstErr != nil {
			t.Fatalf("%s: %v", im.name, firstErr)
		}
	}
	measure := func() (perKey, entries float64) {
		keys, err := s.admin.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			t.Fatalf("%s wrote no keys", im.name)
		}
		var total, zentries int64
		for _, k := range keys {
			n, err := s.admin.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				t.Fatalf("MEMORY USAGE %q: %v", k, err)
			}
			total += n
			if typ, _ := s.admin.Type(ctx, k).Result(); typ == "zset" {
				// Only events: sluice keeps a sequence member scored -seq.
				z, _ := s.admin.ZCount(ctx, k, "0", "+inf").Result()
				zentries += z
			}
		}
		t.Logf("%s: %d keys, e.g. %q", im.name, len(keys), keys[0])
		return float64(total) / memKeys, float64(zentries) / memKeys
	}
	var m memUsage
	fill(memPerKey / 2)
	m.half, _ = measure()
	fill(memPerKey - memPerKey/2)
	m.full, m.entries = measure()
	return m
}

// TestMemoryUsage reports Redis bytes per key, per implementation, and
// checks sluice's targets. Run it with -v to see the table.
func TestMemoryUsage(t *testing.T) {
	s := redisServer(t)
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-38s %9s %7s %11s %11s\n", "impl (100/min, 100 admitted)", "bytes/key", "entries", "bytes/entry", "marginal")
	for _, im := range memImpls() {
		m := memoryUsage(t, s, im)
		if m.entries > 0 && m.entries != memPerKey {
			t.Errorf("%s: %.1f ZSET entries per key, want %d (all admitted)", im.name, m.entries, memPerKey)
		}
		fmt.Fprintf(&b, "%-38s %9.1f %7.1f %11.1f %11.1f\n", im.name, m.full, m.entries, m.perEntry(), m.marginal())
		if target, ok := memoryTargets[im.name]; ok {
			got := m.full
			if m.entries > 0 {
				got = m.perEntry()
			}
			if got > target {
				t.Errorf("%s: %.1f bytes, target <= %.0f", im.name, got, target)
			}
		}
	}
	t.Log(b.String())
}

package sluicetest

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// benchLimit is the limit Bench uses for algorithm a: 1000 per second, or
// for the sliding log its largest Rate, 500, per half second.
func benchLimit(a sluice.Algorithm) sluice.Limit {
	if a == sluice.SlidingLog {
		return sluice.Limit{Algorithm: a, Rate: 500, Period: 500 * time.Millisecond}
	}
	return sluice.Limit{Algorithm: a, Rate: 1000, Period: time.Second}
}

// BenchKeys returns n distinct keys like those of a real deployment.
func BenchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "tenant:" + strconv.Itoa(i) + ":route:/v1/items"
	}
	return keys
}

// Bench benchmarks a store: per algorithm, one key and 10000 keys (those
// of BenchKeys), serial (b.Loop) and parallel (b.RunParallel), with
// allocations reported. The limit is 1000 per second (burst 1000), so that
// a hot key is mostly denied and a spread of keys mostly admitted. Each
// sub-benchmark gets a fresh store from newStore. Of the options, only
// WithAlgorithms applies: the algorithms to benchmark (default all).
func Bench(b *testing.B, newStore func(b *testing.B) sluice.Store, opts ...Option) {
	cfg := &config{}
	for _, o := range opts {
		o(cfg)
	}
	if cfg.err != nil {
		b.Fatal(cfg.err)
	}
	ctx := context.Background()
	for _, a := range cfg.only(algorithms) {
		lim := benchLimit(a)
		for _, nk := range []int{1, 10000} {
			keys := BenchKeys(nk)
			name := a.String() + "/keys=" + strconv.Itoa(nk)
			b.Run(name+"/serial", func(b *testing.B) {
				s := newStore(b)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, err := s.AllowN(ctx, keys[i%nk], lim, 1); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				s := newStore(b)
				var next atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					// Each goroutine walks the keys from its own offset.
					i := int(next.Add(7919))
					for pb.Next() {
						if _, err := s.AllowN(ctx, keys[i%nk], lim, 1); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
			})
		}
	}
}

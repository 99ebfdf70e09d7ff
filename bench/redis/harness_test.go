package redis

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// decideFunc makes one rate-limit decision for key. A denial is not an
// error.
type decideFunc func(ctx context.Context, key string) error

// impl is one rate limiter under test: setup connects it to the server
// and returns its decide function and a clean-up.
type impl struct {
	name  string
	setup func(tb testing.TB, s *server) (decideFunc, func())
}

// concurrencies and keyCounts are the benchmark grid.
var (
	concurrencies = []int{1, 16, 64, 256}
	keyCounts     = []int{10000, 1}
)

// benchRate is the limit every implementation enforces in BenchmarkDecisions:
// 1000 per second per key (burst 1000). With 10,000 keys almost every
// decision admits; with one hot key most deny.
const benchRate = 1000

func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench:%d", i)
	}
	return keys
}

// BenchmarkDecisions measures decisions/s and p50/p99 latency with a fixed
// pool of c workers sharing b.N decisions, for 10,000 keys (round robin)
// and for one hot key.
func BenchmarkDecisions(b *testing.B) {
	s := redisServer(b)
	for _, im := range impls() {
		for _, nk := range keyCounts {
			keys := keyNames(nk)
			for _, c := range concurrencies {
				b.Run(fmt.Sprintf("impl=%s/keys=%d/c=%d", im.name, nk, c), func(b *testing.B) {
					s.flush(b)
					decide, done := im.setup(b, s)
					defer done()
					// Warm up: load scripts, open connections.
					for i := range min(c, 64) {
						if err := decide(context.Background(), keys[i%len(keys)]); err != nil {
							b.Fatalf("%s warm-up: %v", im.name, err)
						}
					}
					runPool(b, s, c, keys, decide)
				})
			}
		}
	}
}

// runPool runs b.N decisions on c workers and reports decisions/s, the
// p50/p99 latency in microseconds, and the server's command time per
// decision (INFO commandstats), which shows what a script costs Redis.
func runPool(b *testing.B, s *server, c int, keys []string, decide decideFunc) {
	hists := make([]histogram, c)
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	ctx := context.Background()
	n := int64(b.N)
	var wg sync.WaitGroup
	usec0 := s.commandUsec(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for w := range c {
		h := &hists[w]
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				err := decide(ctx, keys[i%int64(len(keys))])
				h.record(time.Since(t0))
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	usec := s.commandUsec(b) - usec0
	if err := firstErr.Load(); err != nil {
		b.Fatalf("decision failed: %v", *err)
	}
	var all histogram
	for i := range hists {
		all.merge(&hists[i])
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(all.quantile(0.50))/1e3, "p50-µs")
	b.ReportMetric(float64(all.quantile(0.99))/1e3, "p99-µs")
	b.ReportMetric(float64(usec)/float64(b.N), "redis-µs/op")
}

// histogram is a log-linear latency histogram over nanoseconds: exact
// below 64 ns, then 64 buckets per power of two (under 1.6% error).
type histogram struct {
	counts [64 * 64]uint64
}

const subBuckets = 64

func bucketOf(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	e := bits.Len64(ns) - 7 // ns>>e is in [64, 128)
	return (e+1)*subBuckets + int(ns>>e) - subBuckets
}

// bucketValue is the midpoint of bucket i.
func bucketValue(i int) uint64 {
	if i < subBuckets {
		return uint64(i)
	}
	e := i/subBuckets - 1
	m := uint64(i%subBuckets + subBuckets)
	return m<<e + (uint64(1)<<e)/2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// quantile returns the latency in ns at quantile q (0 < q <= 1).
func (h *histogram) quantile(q float64) uint64 {
	var total uint64
	for _, c := range h.counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return bucketValue(i)
		}
	}
	return bucketValue(len(h.counts) - 1)
}

func TestHistogram(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := time.Duration(h.quantile(tt.q))
		if diff := got - tt.want; diff < -tt.want/50 || diff > tt.want/50 {
			t.Errorf("quantile(%v) = %v, want %v within 2%%", tt.q, got, tt.want)
		}
	}
	for _, ns := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 1 << 40, 1<<63 + 5} {
		b := bucketOf(ns)
		if b < 0 || b >= len(h.counts) {
			t.Fatalf("bucketOf(%d) = %d, out of range", ns, b)
		}
		if v := bucketValue(b); ns >= 64 && (v < ns-ns/32 || v > ns+ns/32) {
			t.Errorf("bucketValue(bucketOf(%d)) = %d, want within 3%%", ns, v)
		}
	}
}

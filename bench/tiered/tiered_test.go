// Package tiered_test benchmarks sluice's local tier and failover on one
// local redis-server that the benchmarks start themselves (on a free
// loopback port; skipped when redis-server is not installed):
//
//	cd bench && go test -run '^$' -bench . -benchtime 5000000x ./tiered
//
// BenchmarkTieredLeases: tiered with leases over redisstore (rueidis), 64
// concurrent callers, half of the decisions on one hot key (100,000 per
// second, fixed window: mostly denied, from the denial cache) and half
// spread over 10,000 keys (1,000 per second each). It reports
// decisions/s, shared-calls/decision (Lease, Return and AllowN calls,
// including the returns at Close) and over-admitted (hot-key admissions
// beyond Rate in a window, counting only admissions whose whole call lay
// inside one window: must be 0).
//
// BenchmarkOutageBreakerOpen: failover over a killed redis-server, the
// breaker open, FailClosed and FailOpen decisions; reports p50-ns and
// p99-ns of a decision.
//
// BenchmarkFailoverTieredLeases: the stack of package stack,
// tiered(failover(redis)), healthy, same load as BenchmarkTieredLeases, with
// the default deadline and a long one; reports degraded/decision and
// breaker-opens too.
package tiered_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/stack"
	"github.com/sluicehq/sluice/tiered"
)

const (
	callers  = 64
	coldKeys = 10_000
)

var (
	hotLimit  = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100_000, Period: time.Second}
	coldLimit = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1_000, Period: time.Second}
)

func newClient(b *testing.B, addr string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatalf("rueidis.NewClient(%s): %v", addr, err)
	}
	b.Cleanup(c.Close)
	return c
}

func keys(prefix string) []string {
	ks := make([]string, coldKeys)
	for i := range ks {
		ks[i] = prefix + "cold/" + strconv.Itoa(i)
	}
	return ks
}

// hotCount counts hot-key admissions per window (µs / Period), keeping
// only those whose call began and ended in the same window.
type hotCount map[int64]int

// runLoad runs the mixed load through s with 64 callers and returns the
// merged hot-key window counts.
func runLoad(b *testing.B, s sluice.Store, prefix string) hotCount {
	ks := keys(prefix)
	hot := prefix + "hot"
	ctx := context.Background()
	var mu sync.Mutex
	all := hotCount{}
	p := hotLimit.Period.Microseconds()
	b.SetParallelism(max(callers/runtime.GOMAXPROCS(0), 1))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		mine := hotCount{}
		for pb.Next() {
			if rng.IntN(2) == 0 {
				before := time.Now().UnixMicro()
				d, err := s.AllowN(ctx, hot, hotLimit, 1)
				if err != nil {
					b.Error(err)
					return
				}
				if d.Allowed {
					after := time.Now().UnixMicro()
					if w := before / p; w == after/p {
						mine[w]++
					}
				}
				continue
			}
			if _, err := s.AllowN(ctx, ks[rng.IntN(len(ks))], coldLimit, 1); err != nil {
				b.Error(err)
				return
			}
		}
		mu.Lock()
		for w, n := range mine {
			all[w] += n
		}
		mu.Unlock()
	})
	b.StopTimer()
	return all
}

func overAdmitted(c hotCount) int {
	over := 0
	for _, n := range c {
		over += max(n-hotLimit.Rate, 0)
	}
	return over
}

func BenchmarkTieredLeases(b *testing.B) {
	srv := startRedis(b)
	c := newClient(b, srv.Addr)
	s, err := tiered.New(redisstore.NewRueidis(c), tiered.WithLeases(1000, 0.5, time.Second))
	if err != nil {
		b.Fatal(err)
	}
	prefix := "bench/" + strconv.FormatUint(rand.Uint64(), 36) + "/"
	counts := runLoad(b, s, prefix)
	elapsed := b.Elapsed()
	if err := s.Close(); err != nil {
		b.Error(err)
	}
	st := s.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(st.Shared)/float64(b.N), "shared-calls/decision")
	b.ReportMetric(float64(st.Local)/float64(b.N), "local/decision")
	b.ReportMetric(float64(overAdmitted(counts)), "over-admitted")
}

func BenchmarkFailoverTieredLeases(b *testing.B) {
	// The default deadline (50ms) and a long one: on a loaded machine a
	// shared call can miss 50ms (redis-server starved of CPU), which opens
	// the breaker; the long one shows the wrapper's own cost.
	for _, timeout := range []time.Duration{failover.DefaultTimeout, time.Second} {
		b.Run("timeout="+timeout.String(), func(b *testing.B) {
			srv := startRedis(b)
			c := newClient(b, srv.Addr)
			s, err := stack.New(redisstore.NewRueidis(c),
				stack.WithFailover(failover.WithReplicas(4), failover.WithTimeout(timeout)),
				stack.WithTiered(tiered.WithLeases(1000, 0.5, time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			prefix := "bench/" + strconv.FormatUint(rand.Uint64(), 36) + "/"
			counts := runLoad(b, s, prefix)
			elapsed := b.Elapsed()
			if err := s.Close(); err != nil {
				b.Error(err)
			}
			st, fs := s.Tiered().Stats(), s.Failover().Stats()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
			b.ReportMetric(float64(st.Shared)/float64(b.N), "shared-calls/decision")
			b.ReportMetric(float64(fs.Degraded)/float64(b.N), "degraded/decision")
			b.ReportMetric(float64(fs.BreakerOpens), "breaker-opens")
			b.ReportMetric(float64(overAdmitted(counts)), "over-admitted")
		})
	}
}

func BenchmarkOutageBreakerOpen(b *testing.B) {
	srv := startRedis(b)
	c := newClient(b, srv.Addr)
	s, err := failover.New(redisstore.NewRueidis(c), failover.WithReplicas(4), failover.WithProbeInterval(100*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	srv.Kill()
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1000, Period: time.Second}
	for i := 0; !s.Stats().Open; i++ {
		if i > 1000 {
			b.Fatalf("breaker not open after %d decisions on a killed server: %+v", i, s.Stats())
		}
		s.AllowN(ctx, "open-it", lim, 1)
	}
	var mu sync.Mutex
	var lats []time.Duration
	ks := make([]string, 64)
	for i := range ks {
		ks[i] = "k" + strconv.Itoa(i)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		mine := make([]time.Duration, 0, 1<<16)
		closed, open := lim, lim.WithFailureMode(sluice.FailOpen)
		for i := 0; pb.Next(); i++ {
			l := closed
			if i%2 == 1 {
				l = open
			}
			start := time.Now()
			_, err := s.AllowN(ctx, ks[i%64], l, 1)
			lat := time.Since(start)
			if err != nil {
				b.Error(err)
				return
			}
			if len(mine) < cap(mine) {
				mine = append(mine, lat)
			}
		}
		mu.Lock()
		lats = append(lats, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	if st := s.Stats(); !st.Open || st.SharedCalls > 1000 {
		b.Errorf("stats %+v: want the breaker open and no shared call during the benchmark", st)
	}
	slices.Sort(lats)
	if len(lats) > 0 {
		b.ReportMetric(float64(lats[len(lats)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lats[len(lats)*99/100].Nanoseconds()), "p99-ns")
	}
}

package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// BenchmarkAllow measures decisions at 64 concurrent callers over 10000
// keys, beside the cheapest possible scripted decision (EVALSHA of a
// one-line INCR) through the same rueidis client. The cross-library
// comparison lives in bench/redis.
func BenchmarkAllow(b *testing.B) {
	srv := redistest.Server(b)
	c := newRueidis(b, srv.Addr)
	keys := sluicetest.BenchKeys(10000)
	par := max(64/runtime.GOMAXPROCS(0), 1)
	b.Run("cheapest=evalsha-incr", func(b *testing.B) {
		incr := rueidis.NewLuaScript("return redis.call('INCR', KEYS[1])")
		var i atomic.Uint64
		b.SetParallelism(par)
		b.ReportAllocs()
		stats(b, srv)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				k := keys[i.Add(1)%uint64(len(keys))]
				if err := incr.Exec(context.Background(), c, []string{k}, nil).Error(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.FixedWindow, sluice.TokenBucket, sluice.SlidingWindow, sluice.SlidingLog} {
		for _, batch := range []bool{true, false} {
			b.Run(fmt.Sprintf("alg=%v/batching=%v", a, batch), func(b *testing.B) {
				s := NewRueidis(c, WithBatching(batch))
				lim := sluice.Limit{Algorithm: a, Rate: benchRate, Period: time.Second}
				var i atomic.Uint64
				b.SetParallelism(par)
				b.ReportAllocs()
				stats(b, srv)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						k := keys[i.Add(1)%uint64(len(keys))]
						if _, err := s.AllowN(context.Background(), k, lim, 1); err != nil {
							b.Fatal(err)
						}
					}
				})
				if s.batch != nil {
					b.ReportMetric(float64(s.batch.decisions.Load())/float64(s.batch.batches.Load()), "decisions/batch")
				}
			})
		}
	}
}

// stats reports Redis's and this process's CPU time per decision, which
// other processes on the machine disturb less than ns/op.
func stats(b *testing.B, srv *redistest.Instance) {
	cpu := func() (redis, self time.Duration) {
		for _, l := range strings.Split(srv.MustDo("INFO", "cpu"), "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, _ := strconv.ParseFloat(v, 64)
				redis += time.Duration(f * float64(time.Second))
			}
		}
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		return
	}
	r0, s0 := cpu()
	b.Cleanup(func() {
		r1, s1 := cpu()
		b.ReportMetric(float64(r1-r0)/float64(b.N), "redis-cpu-ns/op")
		b.ReportMetric(float64(s1-s0)/float64(b.N), "client-cpu-ns/op")
	})
}

// benchRate is the benchmark's Rate per second: at 1000, a key's state
// matters for 1ms and Redis deletes and re-creates it between visits.
var benchRate = 1000

// BenchmarkAllowCluster measures decisions on a local 3-master Cluster,
// batched per hash slot or not, for 10,000 keys (spread over the slots)
// and for one hot key, under a cancellable context as a server's request
// carries, at 32 callers per CPU.
func BenchmarkAllowCluster(b *testing.B) {
	cl := redistest.Cluster(b, 3, 0)
	c := newRueidis(b, cl.Addrs()...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: benchRate, Period: time.Second}
	for _, nk := range []int{10000, 1} {
		keys := sluicetest.BenchKeys(nk)
		for _, batch := range []bool{true, false} {
			b.Run(fmt.Sprintf("keys=%d/batching=%v", nk, batch), func(b *testing.B) {
				s := NewRueidis(c, WithBatching(batch))
				var i atomic.Uint64
				b.SetParallelism(32)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						k := keys[i.Add(1)%uint64(len(keys))]
						if _, err := s.AllowN(ctx, k, lim, 1); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
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
		b.Run(fmt.Sprintf("alg=%v", a), func(b *testing.B) {
			s := NewRueidis(c)
			lim := sluice.Limit{Algorithm: a, Rate: 1000, Period: time.Second}
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
		})
	}
}

// stats reports Redis's own time per script call (-v).
func stats(b *testing.B, srv *redistest.Instance) {
	if !testing.Verbose() {
		return
	}
	srv.MustDo("CONFIG", "RESETSTAT")
	b.Cleanup(func() {
		for _, l := range strings.Split(srv.MustDo("INFO", "commandstats"), "\n") {
			if strings.HasPrefix(l, "cmdstat_evalsha:") {
				b.Log(l)
			}
		}
	})
}

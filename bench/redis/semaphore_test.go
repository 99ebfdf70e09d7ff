package redis

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// semConcurrencies are the callers at once in BenchmarkSemaphore.
var semConcurrencies = []int{1, 64, 256}

// runConcurrent runs b.N calls of op on c goroutines (RunParallel, with
// SetParallelism so that about c run at once; c = 1 is a plain loop) and
// reports ops/s under unit.
func runConcurrent(b *testing.B, c int, unit string, op func(ctx context.Context) error) {
	b.ReportAllocs()
	ctx := context.Background()
	start := time.Now()
	if c == 1 {
		for b.Loop() {
			if err := op(ctx); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism(max(1, c/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), unit)
}

// BenchmarkSemaphore measures acquire+release pairs per second through
// redisstore's Semaphore on one key (Max MaxPermits, so every acquire
// succeeds: the cost of the scripts, not of waiting), beside the cheapest
// EVALSHA round trip (a script that returns 1) in the same run. A pair is
// two script runs.
//
//	(cd bench && go test -run '^$' -bench BenchmarkSemaphore -count 3 ./redis)
func BenchmarkSemaphore(b *testing.B) {
	s := redisServer(b)
	lim := sluice.ConcurrencyLimit{Max: sluice.MaxPermits, Lease: time.Minute}
	for _, c := range semConcurrencies {
		b.Run(fmt.Sprintf("op=evalsha-trivial/c=%d", c), func(b *testing.B) {
			s.flush(b)
			rc := newRueidis(b, s)
			defer rc.Close()
			script := rueidis.NewLuaScript("return 1")
			if err := script.Exec(context.Background(), rc, []string{"trivial"}, nil).Error(); err != nil {
				b.Fatal(err)
			}
			runConcurrent(b, c, "evalsha/s", func(ctx context.Context) error {
				return script.Exec(ctx, rc, []string{"trivial"}, nil).Error()
			})
		})
		b.Run(fmt.Sprintf("op=acquire+release/c=%d", c), func(b *testing.B) {
			s.flush(b)
			rc := newRueidis(b, s)
			defer rc.Close()
			st := redisstore.NewRueidis(rc)
			runConcurrent(b, c, "pairs/s", func(ctx context.Context) error {
				h := sluice.NewHolder()
				d, err := st.Acquire(ctx, "bench:sem", lim, h)
				if err != nil {
					return err
				}
				if !d.Acquired {
					return fmt.Errorf("denied with %d held, Max %d", d.Held, lim.Max)
				}
				return st.Release(ctx, "bench:sem", h)
			})
		})
	}
}

// TestSemaphoreMemory reports the memory per held permit: MEMORY USAGE of
// one key's holders with n permits held (NewHolder's 32-hex-digit ids),
// divided by n. Up to 128 holders Redis keeps the ZSET as a listpack,
// beyond as a skiplist and a hash table.
//
//	(cd bench && go test -run TestSemaphoreMemory -v ./redis)
func TestSemaphoreMemory(t *testing.T) {
	s := redisServer(t)
	s.flush(t)
	rc := newRueidis(t, s)
	defer rc.Close()
	st := redisstore.NewRueidis(rc)
	ctx := context.Background()
	for _, n := range []int{100, 1000, 10000} {
		key := "mem:" + strconv.Itoa(n)
		lim := sluice.ConcurrencyLimit{Max: n, Lease: time.Hour}
		for i := range n {
			d, err := st.Acquire(ctx, key, lim, sluice.NewHolder())
			if err != nil || !d.Acquired || d.Held != i+1 {
				t.Fatalf("Acquire %d of %d = %+v, %v", i+1, n, d, err)
			}
		}
		name := "sluice:{" + key + "}c"
		bytes, err := s.admin.MemoryUsage(ctx, name, 0).Result()
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", name, err)
		}
		enc, _ := s.admin.ObjectEncoding(ctx, name).Result()
		per := float64(bytes) / float64(n)
		t.Logf("%5d permits held: %8d bytes (%s), %.1f bytes per permit", n, bytes, enc, per)
		if per < 32 || per > 512 {
			t.Errorf("%.1f bytes per permit with %d held: want between the holder id's 32 and 512", per, n)
		}
	}
}

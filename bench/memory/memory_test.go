package memory

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

const perSecond = 1000

// taker is one decision for key: allowed or not.
type taker func(ctx context.Context, key string) bool

type impl struct {
	name string
	new  func(b *testing.B) taker
}

func memstoreImpl(a sluice.Algorithm) impl {
	lim := sluice.Limit{Algorithm: a, Rate: perSecond, Period: time.Second}
	return impl{"memstore-" + a.String(), func(b *testing.B) taker {
		s := memstore.New()
		b.Cleanup(func() { s.Close() })
		return func(ctx context.Context, key string) bool {
			d, err := s.AllowN(ctx, key, lim, 1)
			if err != nil {
				panic(err)
			}
			return d.Allowed
		}
	}}
}

var impls = []impl{
	memstoreImpl(sluice.GCRA),
	memstoreImpl(sluice.TokenBucket),
	memstoreImpl(sluice.FixedWindow),
	memstoreImpl(sluice.SlidingWindow),
	memstoreImpl(sluice.SlidingLog),
	{"sethvargo", func(b *testing.B) taker {
		s, err := memorystore.New(&memorystore.Config{Tokens: perSecond, Interval: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(context.Background()) })
		return func(ctx context.Context, key string) bool {
			_, _, _, ok, err := s.Take(ctx, key)
			if err != nil {
				panic(err)
			}
			return ok
		}
	}},
	{"xrate-mutex", func(b *testing.B) taker {
		// A map of limiters behind one mutex, as most services write it.
		var mu sync.Mutex
		m := map[string]*rate.Limiter{}
		return func(ctx context.Context, key string) bool {
			mu.Lock()
			l, ok := m[key]
			if !ok {
				l = rate.NewLimiter(perSecond, perSecond)
				m[key] = l
			}
			mu.Unlock()
			return l.Allow()
		}
	}},
	{"xrate-syncmap", func(b *testing.B) taker {
		var m sync.Map
		return func(ctx context.Context, key string) bool {
			v, ok := m.Load(key)
			if !ok {
				v, _ = m.LoadOrStore(key, rate.NewLimiter(perSecond, perSecond))
			}
			return v.(*rate.Limiter).Allow()
		}
	}},
}

// BenchmarkMemory: impl × keys × serial/parallel. Keys are visited in turn,
// each goroutine from its own offset.
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	for _, nk := range []int{1, 10000} {
		keys := sluicetest.BenchKeys(nk)
		for _, im := range impls {
			name := "impl=" + im.name + "/keys=" + strconv.Itoa(nk)
			b.Run(name+"/mode=serial", func(b *testing.B) {
				take := im.new(b)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					take(ctx, keys[i%nk])
					i++
				}
			})
			b.Run(name+"/mode=parallel", func(b *testing.B) {
				take := im.new(b)
				var next atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(7919))
					for pb.Next() {
						take(ctx, keys[i%nk])
						i++
					}
				})
			})
		}
	}
}

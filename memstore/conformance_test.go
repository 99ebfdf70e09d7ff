package memstore_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

var realTime = flag.Bool("realtime", false, "also run the conformance suite on real time, as a Redis store runs it")

func newStore(t testing.TB, opts ...memstore.Option) *memstore.Store {
	s := memstore.New(opts...)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return newStore(t)
	}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
		return newStore(t, memstore.WithClock(c.Now))
	}))
}

// TestConformanceRealTime runs the suite on the real clock, as a Redis
// store runs it, so that the tolerance design itself is exercised.
func TestConformanceRealTime(t *testing.T) {
	if !*realTime {
		t.Skip("runs on real time for several seconds; enable with -realtime")
	}
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return newStore(t)
	}, sluicetest.WithTolerance(20*time.Millisecond))
}

func BenchmarkMemstore(b *testing.B) {
	sluicetest.Bench(b, func(b *testing.B) sluice.Store { return newStore(b) })
}

// BenchmarkAllowMulti: a per-second and a per-day limit on one tenant, and
// a per-route limit, decided together.
func BenchmarkAllowMulti(b *testing.B) {
	s := newStore(b)
	keys := sluicetest.BenchKeys(10000)
	perSecond := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1000, Period: time.Second}
	perDay := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1 << 30, Period: 24 * time.Hour}
	route := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1 << 20, Period: time.Minute}
	reqs := make([]sluice.Request, 3)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i%len(keys)]
		reqs[0] = sluice.Request{Key: k, Limit: perSecond, N: 1}
		reqs[1] = sluice.Request{Key: k, Limit: perDay, N: 1}
		reqs[2] = sluice.Request{Key: "route:/v1/items", Limit: route, N: 1}
		if _, err := s.AllowMulti(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

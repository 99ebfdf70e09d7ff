package memstore_test

import (
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

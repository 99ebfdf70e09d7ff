package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

var benchLimit = sluice.Limit{Algorithm: sluice.GCRA, Rate: 1 << 30, Period: time.Second}

// BenchmarkOverhead: memstore alone, behind a healthy failover (the
// deadline and the breaker's accounting), and behind an open breaker.
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	b.Run("memstore", func(b *testing.B) {
		m := memstore.New()
		defer m.Close()
		b.ReportAllocs()
		for b.Loop() {
			m.AllowN(ctx, "k", benchLimit, 1)
		}
	})
	b.Run("failover=healthy", func(b *testing.B) {
		m := memstore.New()
		defer m.Close()
		s := mustNew(b, m)
		b.ReportAllocs()
		for b.Loop() {
			s.AllowN(ctx, "k", benchLimit, 1)
		}
	})
	for _, p := range []sluice.FailureMode{sluice.FailClosed, sluice.FailOpen} {
		b.Run("failover=open/policy=fail_"+p.String(), func(b *testing.B) {
			f := &faulty{Store: memstore.New()}
			defer f.Store.Close()
			f.mode.Store(failing)
			s := mustNew(b, f, failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour), failover.WithReplicas(4))
			lim := benchLimit.WithFailureMode(p)
			s.AllowN(ctx, "k", lim, 1)
			b.ReportAllocs()
			for b.Loop() {
				s.AllowN(ctx, "k", lim, 1)
			}
		})
	}
}

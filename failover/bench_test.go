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
		s := failover.New(m)
		defer s.Close()
		b.ReportAllocs()
		for b.Loop() {
			s.AllowN(ctx, "k", benchLimit, 1)
		}
	})
	for _, p := range []failover.Policy{failover.FailClosed, failover.FailOpen} {
		b.Run("failover=open/policy="+p.String(), func(b *testing.B) {
			f := &faulty{Store: memstore.New()}
			defer f.Store.Close()
			f.mode.Store(failing)
			s := failover.New(f, failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour), failover.WithReplicas(4))
			defer s.Close()
			pctx := failover.WithPolicy(ctx, p)
			s.AllowN(pctx, "k", benchLimit, 1)
			b.ReportAllocs()
			for b.Loop() {
				s.AllowN(pctx, "k", benchLimit, 1)
			}
		})
	}
}

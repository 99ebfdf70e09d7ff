package region_test

import (
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/region"
)

// The bound under any interleaving: random regions (round trips, jitter,
// demands, from idle to many times the limit), a random failure mode, and
// a random partition of one region (cut or black-holed, at any time, for
// any length): no window of a fixed-window limit admits more than its
// Rate, counting every admission at the time it was made, granted or by
// the failure mode; FailClosed admits nothing degraded.
func TestExactUnderAnyInterleaving(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		per := []time.Duration{250 * time.Millisecond, time.Second, 2 * time.Second}[rng.IntN(3)]
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 20 + rng.IntN(2000), Period: per,
			FailureMode: []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed}[rng.IntN(2)]}
		regions := 2 + rng.IntN(3)
		type reg struct {
			rtt, jitter time.Duration
			rate        float64
			opts        []region.Option
		}
		var rs []reg
		for range regions {
			r := reg{rtt: time.Duration(5+rng.IntN(150)) * time.Millisecond, jitter: time.Duration(rng.IntN(20)) * time.Millisecond}
			perSec := float64(lim.Rate) / per.Seconds()
			r.rate = perSec * []float64{0.05, 0.3, 1, 3}[rng.IntN(4)]
			r.opts = []region.Option{region.WithRefresh(time.Duration(10+rng.IntN(200)) * time.Millisecond)}
			if rng.IntN(2) == 0 {
				r.opts = append(r.opts, region.WithFailOpenShare(rng.Float64()))
			}
			rs = append(rs, r)
		}
		cutAt := time.Duration(rng.Int64N(int64(4 * per)))
		cutFor := time.Duration(rng.Int64N(int64(3 * per)))
		state := []string{"cut", "hole"}[rng.IntN(2)]
		victim := rng.IntN(regions)
		t.Run("", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				home := newHome(t)
				var stores []*region.Store
				var wans []*wan
				for i, r := range rs {
					w := newWAN(home, r.rtt, r.jitter, seed*10+uint64(i))
					wans = append(wans, w)
					stores = append(stores, mustNew(t, w, string(rune('a'+i)), r.opts...))
				}
				start := time.Now()
				var waits []func() []rec
				for i, s := range stores {
					waits = append(waits, load(s, i%3, "k", lim, max(rs[i].rate, 1), 7*per))
				}
				time.Sleep(cutAt)
				wans[victim].set(state)
				time.Sleep(cutFor)
				wans[victim].set("")
				var recs []rec
				for _, f := range waits {
					recs = append(recs, f()...)
				}
				for _, s := range stores {
					s.Close()
				}
				admitted := 0
				for _, r := range recs {
					if r.allowed && r.err == nil {
						admitted++
					}
					if r.degraded && r.allowed && lim.FailureMode == sluice.FailClosed {
						t.Fatalf("a degraded admission under FailClosed: %+v", r)
					}
				}
				for w, c := range perWindow(recs, per) {
					if c[3] > lim.Rate {
						t.Errorf("seed %d (%v, %d regions, %s of region %d at %v for %v): window %v admitted %d (%v), limit %d",
							seed, lim, regions, state, victim, cutAt, cutFor, w.Sub(start), c[3], c, lim.Rate)
					}
				}
				t.Logf("seed %d: %v, %d regions, %s at %v for %v: %d of %d admitted", seed, lim, regions, state, cutAt, cutFor, admitted, len(recs))
			})
		})
	}
}

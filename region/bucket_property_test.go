package region_test

import (
	"math/rand/v2"
	"sort"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/region"
)

// The bound of TokenBucket and GCRA limits under random interleavings
// (two to four regions, round trips, jitter, demands from idle to three
// times the rate, lease times, and one region cut off or black-holed
// under FailClosed at a random time for a random length): in any
// interval of length τ, at most Burst + Rate·(τ + ℓ)/Period admitted, ℓ
// the lease time, counting each admission at the time it was made.
func TestBucketBoundUnderAnyInterleaving(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		per := []time.Duration{250 * time.Millisecond, time.Second}[rng.IntN(2)]
		rate := 20 + rng.IntN(1000)
		lim := sluice.Limit{Algorithm: []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA}[rng.IntN(2)],
			Rate: rate, Period: per, Burst: 1 + rng.IntN(2*rate), FailureMode: sluice.FailClosed}
		lease := time.Duration(50+rng.IntN(1000)) * time.Millisecond
		regions := 2 + rng.IntN(3)
		type reg struct {
			rtt, jitter time.Duration
			rate        float64
		}
		var rs []reg
		for range regions {
			perSec := float64(lim.Rate) / per.Seconds()
			rs = append(rs, reg{rtt: time.Duration(5+rng.IntN(150)) * time.Millisecond, jitter: time.Duration(rng.IntN(20)) * time.Millisecond,
				rate: perSec * []float64{0.05, 0.3, 1, 3}[rng.IntN(4)]})
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
					stores = append(stores, mustNew(t, w, string(rune('a'+i)), region.WithLeaseTime(lease)))
				}
				var waits []func() []rec
				for i, s := range stores {
					waits = append(waits, load(s, i%3, "k", lim, max(rs[i].rate, 1), 7*per))
				}
				time.Sleep(cutAt)
				wans[victim].set(state)
				time.Sleep(cutFor)
				wans[victim].set("")
				var at []time.Time
				for _, f := range waits {
					for _, r := range f() {
						if r.allowed && r.err == nil {
							if r.degraded {
								t.Fatalf("a degraded admission under FailClosed: %+v", r)
							}
							at = append(at, r.at)
						}
					}
				}
				for _, s := range stores {
					s.Close()
				}
				sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
				tightest := 0.0 // the largest share of the bound reached
				for _, tau := range []time.Duration{per / 10, per / 2, per, 2 * per, 5 * per} {
					bound := float64(lim.Burst) + float64(lim.Rate)*float64(tau+lease)/float64(per)
					j := 0
					for i := range at {
						for j < len(at) && at[j].Sub(at[i]) <= tau {
							j++
						}
						n := j - i
						tightest = max(tightest, float64(n)/bound)
						if float64(n) > bound {
							t.Fatalf("seed %d (%v, lease %v, %d regions, %s of region %d at %v for %v): %d admitted in %v from %v, bound %.0f",
								seed, lim, lease, regions, state, victim, cutAt, cutFor, n, tau, at[i], bound)
						}
					}
				}
				t.Logf("seed %d: %v, lease %v, %d regions: %d admitted, at most %.2f of the bound in an interval", seed, lim, lease, regions, len(at), tightest)
			})
		})
	}
}

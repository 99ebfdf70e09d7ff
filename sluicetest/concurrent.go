package sluicetest

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// errorer is the part of testing.TB that checks report through.
type errorer interface {
	Helper()
	Errorf(format string, args ...any)
}

// admission brackets the store's time of one admission: it lies in
// [before, after], in µs since the epoch.
type admission struct{ before, after int64 }

// testConcurrent: many goroutines on one key never get more than the limit.
// Every admission's time is bracketed by the clock read before and after
// the call, and the invariants are checked on what those brackets prove:
//   - SlidingLog: no interval of length Period holds more than Rate;
//   - TokenBucket, GCRA: admissions in any interval of length t are at most
//     Burst + Rate·t/Period;
//   - FixedWindow, SlidingWindow: no epoch-aligned window holds more than Rate.
func (s *suite) testConcurrent(t *testing.T) {
	g := s.group(t)
	defer g.wait()
	for _, a := range s.cfg.only(algorithms) {
		g.run(a.String(), func(t *testing.T) {
			e := s.env(t, 0)
			lim := e.lim(sluice.Limit{Algorithm: a, Rate: 10, Period: time.Second})
			if a == sluice.TokenBucket || a == sluice.GCRA {
				lim.Burst = 15
			}
			key := newKey(t)
			adm := e.hammer(key, lim)
			if len(adm) < lim.Capacity() {
				t.Fatalf("%d admissions, want at least the capacity %d: the store denied a fresh key", len(adm), lim.Capacity())
			}
			checkInvariant(t, lim, adm)
		})
	}
}

// hammer runs goroutines calling AllowN(key, lim, 1) for about 15 periods
// of the store's time and returns the admissions, sorted by after.
func (e *env) hammer(key string, lim sluice.Limit) []admission {
	const workers = 8
	var (
		mu  sync.Mutex
		adm []admission
		wg  sync.WaitGroup
	)
	end := e.start.Add(3 * lim.Period) // real time: three periods
	step := lim.Period / 40
	ops := 150 // fake clock: 8 × 150 × Period/80 on average = 15 periods
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			var mine []admission
			for i := 0; ; i++ {
				if e.exact() && i >= ops || !e.exact() && time.Now().After(end) {
					break
				}
				b := e.clockNow()
				d, err := e.s.AllowN(context.Background(), key, lim, 1)
				a := e.clockNow()
				if err != nil {
					e.t.Errorf("AllowN(%q, %v, 1): %v", key, lim, err)
					return
				}
				checkDecision(e.t, d, lim, 1)
				if d.Allowed {
					mine = append(mine, admission{b.UnixMicro(), a.UnixMicro()})
				}
				pause := time.Duration(rng.Int64N(int64(step))).Truncate(µs)
				if e.exact() {
					e.c.Advance(pause)
				} else {
					time.Sleep(pause / 2)
				}
			}
			mu.Lock()
			adm = append(adm, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(adm, func(x, y admission) int { return int(x.after - y.after) })
	return adm
}

func (e *env) clockNow() time.Time {
	if e.c != nil {
		return e.c.Now()
	}
	return time.Now()
}

// checkInvariant reports admissions that certainly break lim, adm sorted
// by after.
func checkInvariant(t errorer, lim sluice.Limit, adm []admission) {
	t.Helper()
	P := lim.Period.Microseconds()
	rate := int64(lim.Rate)
	switch lim.Algorithm {
	case sluice.SlidingLog:
		// Rate+1 admissions whose times all lie within less than P.
		for i := 0; i+lim.Rate < len(adm); i++ {
			j := i + lim.Rate
			lo := adm[i].before
			for _, x := range adm[i : j+1] {
				lo = min(lo, x.before)
			}
			if adm[j].after-lo < P {
				t.Errorf("%d admissions within %dµs, want at most %d in any %v", lim.Rate+1, adm[j].after-lo, lim.Rate, lim.Period)
				return
			}
		}
	case sluice.TokenBucket, sluice.GCRA:
		c := int64(lim.Capacity())
		for i := range adm {
			lo := adm[i].before
			for j := i; j < len(adm); j++ {
				lo = min(lo, adm[j].before)
				count, span := int64(j-i+1), adm[j].after-lo
				if count*P > c*P+rate*span {
					t.Errorf("%d admissions within %dµs, want at most Burst + Rate·t/Period = %d + %d·%d/%d", count, span, c, rate, span, P)
					return
				}
			}
		}
	case sluice.FixedWindow, sluice.SlidingWindow:
		counts := map[int64]int64{}
		for _, x := range adm {
			if w := x.before / P; w == x.after/P {
				counts[w]++
			}
		}
		for w, n := range counts {
			if n > rate {
				t.Errorf("%d admissions in the window starting at %dµs, want at most %d", n, w*P, rate)
			}
		}
	}
}

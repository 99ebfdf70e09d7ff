package region_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/region"
)

// rec is one decision: when it returned, how long it took, its answer.
type rec struct {
	region   int
	sent     time.Time
	at       time.Time
	took     time.Duration
	allowed  bool
	degraded bool
	err      error
}

// load offers rate requests per second to st for d, evenly spaced from
// now, each its own goroutine (an open loop) with a deadline of 2 s, and
// returns their records once all have returned.
func load(st sluice.Store, region int, key string, lim sluice.Limit, rate float64, d time.Duration) func() []rec {
	var mu sync.Mutex
	var recs []rec
	var wg sync.WaitGroup
	gap := time.Duration(float64(time.Second) / rate)
	wg.Add(1)
	go func() {
		defer wg.Done()
		end := time.Now().Add(d)
		for t := time.Now(); t.Before(end); t = t.Add(gap) {
			time.Sleep(time.Until(t))
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				sent := time.Now()
				dec, err := st.AllowN(ctx, key, lim, 1)
				r := rec{region: region, sent: sent, at: time.Now(), took: time.Since(sent), allowed: dec.Allowed, degraded: dec.Degraded, err: err}
				mu.Lock()
				recs = append(recs, r)
				mu.Unlock()
			}()
		}
	}()
	return func() []rec {
		wg.Wait()
		return recs
	}
}

// perWindow counts the admissions per window of per, by return time.
func perWindow(recs []rec, per time.Duration) map[time.Time][]int {
	m := map[time.Time][]int{}
	for _, r := range recs {
		if r.err != nil || !r.allowed {
			continue
		}
		w := r.at.Truncate(per)
		if m[w] == nil {
			m[w] = make([]int, 4)
		}
		m[w][r.region]++
		m[w][3]++
	}
	return m
}

func newHome(t *testing.T) *memstore.Store {
	m := memstore.New(memstore.WithSweepInterval(0))
	t.Cleanup(func() { m.Close() })
	return m
}

func mustNew(t *testing.T, home sluice.Store, holder string, opts ...region.Option) *region.Store {
	t.Helper()
	s, err := region.New(home, holder, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Below the limit, after a key's first answer, no decision waits: the
// units for the next ones are fetched ahead, one call per refresh or so,
// whatever the decision rate; and every request is admitted but near the
// edges of a window: a window's units cannot be had before it starts and
// come a round trip after, and they end half a round trip before the
// window does (their end is counted from the call's send time, since the
// time the call took to reach the store is not known).
func TestRefreshAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		home := newHome(t)
		w := newWAN(home, 80*time.Millisecond, 10*time.Millisecond, 1)
		s := mustNew(t, w, "eu")
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Second}
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		start := time.Now()
		recs := load(s, 0, "k", lim, 500, 5*time.Second)()
		s.Close()
		waited, denied, early := 0, 0, 0
		for _, r := range recs {
			if r.took > 0 && r.sent.Sub(start) > 200*time.Millisecond {
				waited++
			}
			switch {
			case r.allowed && r.err == nil:
			case r.sent.Sub(r.sent.Truncate(time.Second)) < 150*time.Millisecond,
				r.sent.Sub(r.sent.Truncate(time.Second)) > 930*time.Millisecond:
				early++
			default:
				denied++
				t.Logf("denied: sent at %v", r.sent.Sub(start))
			}
		}
		calls, _ := w.stats()
		st := s.Stats()
		t.Logf("%d decisions: %d waited after the first round trip, %d denied at a window's edges, %d elsewhere; %d calls to the home store; %+v", len(recs), waited, early, denied, calls, st)
		if waited > 0 {
			t.Errorf("%d decisions waited for the home store after the key's first answer", waited)
		}
		if denied > 0 {
			t.Errorf("%d of %d denied at half the limit away from the windows' edges", denied, len(recs))
		}
		// About one call per refresh (100 ms) and per window start: 50
		// + 5, with room for the demand's measure settling.
		if calls > 80 {
			t.Errorf("%d calls to the home store in 5 s for 2500 decisions: want them bounded by the refresh, not the decisions", calls)
		}
	})
}

// Three regions, each offered the whole limit: no window admits more than
// the limit, the limit is used (at least 95% of it in every window after
// the first), in about equal parts, and no decision waits but each key's
// first.
func TestSaturationShares(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		home := newHome(t)
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Second, FailureMode: sluice.FailOpen}
		var stores []*region.Store
		var wans []*wan
		for i, name := range []string{"eu", "us", "ap"} {
			w := newWAN(home, time.Duration(40+40*i)*time.Millisecond, 10*time.Millisecond, uint64(i))
			wans = append(wans, w)
			stores = append(stores, mustNew(t, w, name))
		}
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		start := time.Now()
		var waits []func() []rec
		for i, s := range stores {
			waits = append(waits, load(s, i, "k", lim, 1000, 6*time.Second))
		}
		var recs []rec
		for _, f := range waits {
			recs = append(recs, f()...)
		}
		for _, s := range stores {
			s.Close()
		}
		waited := 0
		for _, r := range recs {
			if r.took > 0 && r.sent.Sub(start) > 300*time.Millisecond {
				waited++
			}
			if r.err != nil || r.degraded {
				t.Fatalf("decision %+v: an error or a degraded decision while connected", r)
			}
		}
		if waited > 0 {
			t.Errorf("%d decisions waited after each region's first answer", waited)
		}
		for w, c := range perWindow(recs, time.Second) {
			t.Logf("window %v: %v", w.Sub(start), c)
			if c[3] > lim.Rate {
				t.Errorf("window %v: %d admitted, limit %d", w.Sub(start), c[3], lim.Rate)
			}
			if w.After(start) && w.Before(start.Add(6*time.Second)) {
				if c[3] < 950 {
					t.Errorf("window %v: %d admitted under saturation, want >= 950", w.Sub(start), c[3])
				}
				for i := range 3 {
					if c[i] < 300 {
						t.Errorf("window %v: region %d admitted %d, want about a third", w.Sub(start), i, c[i])
					}
				}
			}
		}
		for i, w := range wans {
			_, granted := w.stats()
			for win, n := range granted {
				if n > lim.Rate {
					t.Errorf("region %d: %d granted in window %v", i, n, time.UnixMicro(win))
				}
			}
		}
	})
}

// A region cut off follows FailOpen within the allowance it reserved: no
// window admits more than the limit, through the partition and its heal,
// and the requests held in a black-holed link are not counted at the heal.
func TestPartitionFailOpen(t *testing.T) {
	for _, state := range []string{"cut", "hole"} {
		t.Run(state, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				home := newHome(t)
				lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Second, FailureMode: sluice.FailOpen}
				var stores []*region.Store
				var wans []*wan
				for i, name := range []string{"eu", "us", "ap"} {
					w := newWAN(home, 80*time.Millisecond, 10*time.Millisecond, uint64(i))
					wans = append(wans, w)
					stores = append(stores, mustNew(t, w, name))
				}
				time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
				start := time.Now()
				var waits []func() []rec
				for i, s := range stores {
					waits = append(waits, load(s, i, "k", lim, 1000, 9*time.Second))
				}
				time.Sleep(3*time.Second + 300*time.Millisecond)
				wans[2].set(state)
				time.Sleep(3 * time.Second)
				wans[2].set("")
				var recs []rec
				for _, f := range waits {
					recs = append(recs, f()...)
				}
				st := stores[2].Stats()
				for _, s := range stores {
					s.Close()
				}
				degraded := 0
				for _, r := range recs {
					if r.degraded && r.allowed {
						degraded++
					}
				}
				t.Logf("ap: %+v; %d degraded admissions", st, degraded)
				if degraded == 0 {
					t.Errorf("the cut region admitted nothing by its failure mode")
				}
				for w, c := range perWindow(recs, time.Second) {
					t.Logf("window %v: %v", w.Sub(start), c)
					if c[3] > lim.Rate {
						t.Errorf("window %v: %d admitted (%v), limit %d", w.Sub(start), c[3], c, lim.Rate)
					}
				}
			})
		})
	}
}

// Denials are cached from the send time for the time they are true, so
// that under overload a GCRA key is shed locally: the calls to the home
// store follow the round trip, not the decisions.
func TestOverloadShedsLocally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		home := newHome(t)
		w := newWAN(home, 80*time.Millisecond, 0, 1)
		s := mustNew(t, w, "eu")
		lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Second}
		start := time.Now()
		recs := load(s, 0, "k", lim, 2000, 3*time.Second)()
		s.Close()
		admitted, waited := 0, 0
		for _, r := range recs {
			if r.allowed {
				admitted++
			}
			if r.took > 0 && r.sent.Sub(start) > 200*time.Millisecond {
				waited++
			}
		}
		calls, _ := w.stats()
		t.Logf("%d decisions, %d admitted, %d waited, %d calls", len(recs), admitted, waited, calls)
		if waited > 0 {
			t.Errorf("%d decisions waited at the home store under overload after the first answer", waited)
		}
		if calls > 3*1000/80+10 {
			t.Errorf("%d calls in 3 s at an 80 ms round trip: the decisions, not the round trip, set them", calls)
		}
		// GCRA admits Burst + Rate·t in an interval t: 100 + 300.
		if admitted > 400 || admitted < 300 {
			t.Errorf("%d admitted in 3 s of a 100/s GCRA, want 300 to 400", admitted)
		}
	})
}

// The first use of a key waits for one answer, the waiters served in the
// order they came: those the grant covers are admitted, the others denied,
// none waiting for a second call.
func TestFirstUseServesWaitersInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		home := newHome(t)
		w := newWAN(home, 80*time.Millisecond, 0, 1)
		s := mustNew(t, w, "eu")
		defer s.Close()
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Hour}
		results := make([]bool, 10)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := s.AllowN(context.Background(), "k", lim, 1)
				if err != nil || time.Since(start) != 80*time.Millisecond {
					t.Errorf("waiter %d: %+v, %v after %v, want an answer after one round trip", i, d, err, time.Since(start))
				}
				results[i] = d.Allowed
			}()
			time.Sleep(time.Microsecond) // arrive in order
		}
		wg.Wait()
		want := fmt.Sprint([]bool{true, true, true, true, true, false, false, false, false, false})
		if fmt.Sprint(results) != want {
			t.Errorf("waiters admitted %v, want the first five", results)
		}
	})
}

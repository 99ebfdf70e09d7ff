package region_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

// multiHome is a wan whose AllowMulti calls cross the link too (a round
// trip each) and are counted.
type multiHome struct {
	*wan
	multis atomic.Int64
}

func (m *multiHome) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if len(reqs) == 0 {
		return m.wan.AllowMulti(ctx, reqs)
	}
	m.multis.Add(1)
	if err := m.leg(ctx); err != nil {
		return nil, err
	}
	ds, err := m.wan.AllowMulti(ctx, reqs)
	m.legDeliver()
	return ds, err
}

// An AllowMulti on keys that have had their first answer is decided from
// the units held, at once and all-or-nothing: no call to the home store,
// the requests admitted together until one key's units run out, then
// denied together with nothing spent (the blocking request with a
// RetryAfter, the other with RetryAfter 0 and its units as Remaining). A
// key's first use, and a request that is never granted, go to the home
// store, one round trip.
func TestAllowMultiLocal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		home := &multiHome{wan: newWAN(newHome(t), 80*time.Millisecond, 0, 1)}
		s := mustNew(t, home, "eu")
		defer s.Close()
		a := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}
		b := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}
		both := []sluice.Request{{Key: "a", Limit: a, N: 1}, {Key: "b", Limit: b, N: 1}}

		// First use: the home store decides, and the units are fetched.
		start := time.Now()
		ds, err := s.AllowMulti(ctx, both)
		if err != nil || !ds[0].Allowed || !ds[1].Allowed || time.Since(start) != 80*time.Millisecond {
			t.Fatalf("first AllowMulti = %+v, %v after %v; want both admitted by the home store, one round trip", ds, err, time.Since(start))
		}
		if n := home.multis.Load(); n != 1 {
			t.Fatalf("%d AllowMulti calls reached the home store on first use, want 1", n)
		}
		time.Sleep(time.Second) // the first grants come back
		synctest.Wait()

		// b has 2 of its 3 left at the home store, all granted to the one
		// holder: two more calls admitted, then denials, all at once.
		var lastA int
		for i := range 5 {
			start := time.Now()
			ds, err := s.AllowMulti(ctx, both)
			if err != nil || len(ds) != 2 || time.Since(start) != 0 {
				t.Fatalf("AllowMulti %d = %+v, %v after %v; want decided at once", i, ds, err, time.Since(start))
			}
			want := i < 2
			if ds[0].Allowed != want || ds[1].Allowed != want {
				t.Fatalf("AllowMulti %d = %+v; want admitted %v for both", i, ds, want)
			}
			if want {
				lastA = ds[0].Remaining
				continue
			}
			if ds[1].RetryAfter <= 0 || ds[0].RetryAfter != 0 || ds[0].Remaining != lastA {
				t.Fatalf("denied AllowMulti %d = %+v; want b blocking with a RetryAfter, a with RetryAfter 0 and its %d units held", i, ds, lastA)
			}
		}
		if n := home.multis.Load(); n != 1 {
			t.Errorf("%d AllowMulti calls reached the home store, want only the first use's", n)
		}
		// Nothing of a was spent by the denials.
		if d, err := s.AllowN(ctx, "a", a, 1); err != nil || !d.Allowed || d.Remaining != lastA-1 {
			t.Errorf("AllowN a after the denials = %+v, %v; want admitted with %d remaining", d, err, lastA-1)
		}

		// Invalid calls: the errors the home store gives, before any state.
		for _, tc := range []struct {
			name string
			reqs []sluice.Request
			want error
		}{
			{"two requests on a beyond its capacity", []sluice.Request{{Key: "a", Limit: a, N: 60}, {Key: "a", Limit: a, N: 60}}, sluice.ErrExceedsCapacity},
			{"an empty key", []sluice.Request{{Key: "a", Limit: a, N: 1}, {Key: "", Limit: b, N: 1}}, sluice.ErrInvalidKey},
			{"17 requests", slices.Repeat([]sluice.Request{{Key: "a", Limit: a, N: 1}}, sluice.MaxMultiRequests+1), sluice.ErrExceedsCapacity},
		} {
			_, err := s.AllowMulti(ctx, tc.reqs)
			_, homeErr := home.Store.AllowMulti(ctx, tc.reqs)
			if !errors.Is(err, tc.want) || !errors.Is(homeErr, tc.want) {
				t.Errorf("%s: AllowMulti = %v (the home store: %v), want %v", tc.name, err, homeErr, tc.want)
			}
		}
		if n := home.multis.Load(); n != 1 {
			t.Errorf("%d AllowMulti calls reached the home store after the invalid calls, want 1", n)
		}

		// A sliding log is never granted: the home store decides.
		log := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: time.Hour}
		start = time.Now()
		ds, err = s.AllowMulti(ctx, []sluice.Request{{Key: "a", Limit: a, N: 1}, {Key: "l", Limit: log, N: 1}})
		if err != nil || !ds[0].Allowed || !ds[1].Allowed || time.Since(start) != 80*time.Millisecond || home.multis.Load() != 2 {
			t.Errorf("AllowMulti with a sliding log = %+v, %v after %v, %d home calls; want the home store's decision, one round trip", ds, err, time.Since(start), home.multis.Load())
		}
	})
}

// Two regions, each calling AllowMulti on two keys and AllowN on one of
// them at once: the scarce key never admits more than its limit, and
// every call admits both of its requests or neither.
func TestAllowMultiAllOrNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := newWAN(newHome(t), 80*time.Millisecond, 10*time.Millisecond, 1)
		a := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour}
		b := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 50, Period: time.Hour}
		var multiB, singleB atomic.Int64
		var wg sync.WaitGroup
		for _, name := range []string{"eu", "us"} {
			s := mustNew(t, w, name)
			defer s.Close()
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 60 {
						if g == 0 && i%3 == 0 {
							if d, err := s.AllowN(ctx, "b", b, 1); err == nil && d.Allowed {
								singleB.Add(1)
							}
						} else {
							ds, err := s.AllowMulti(ctx, []sluice.Request{{Key: "a", Limit: a, N: 1}, {Key: "b", Limit: b, N: 1}})
							if err != nil {
								t.Errorf("AllowMulti: %v", err)
								return
							}
							if ds[0].Allowed != ds[1].Allowed {
								t.Errorf("AllowMulti = %+v: admitted one request and not the other", ds)
							}
							if ds[0].Allowed {
								multiB.Add(1)
							}
						}
						time.Sleep(20 * time.Millisecond)
					}
				}()
			}
		}
		wg.Wait()
		t.Logf("b admitted: %d by AllowMulti, %d by AllowN (limit %d)", multiB.Load(), singleB.Load(), b.Rate)
		if got := multiB.Load() + singleB.Load(); got > int64(b.Rate) {
			t.Errorf("b admitted %d in one window, limit %d", got, b.Rate)
		}
		if multiB.Load() == 0 {
			t.Errorf("no AllowMulti admitted anything")
		}
	})
}

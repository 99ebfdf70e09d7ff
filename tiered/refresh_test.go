package tiered_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/tiered"
)

// slow is an exact leaser that takes latency per call, as a store across a
// network does.
type slow struct {
	*exact
	latency time.Duration
}

func (s slow) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	time.Sleep(s.latency)
	return s.exact.Reserve(ctx, key, lim, n)
}

// waits runs requests one every gap and counts those that waited for the
// store (took the store's latency or more), and the admissions.
func waits(t *testing.T, s *tiered.Store, lim sluice.Limit, requests int, gap, latency time.Duration) (waited, admitted int) {
	t.Helper()
	for range requests {
		t0 := time.Now()
		d, err := s.AllowN(ctx, "k", lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(t0) >= latency {
			waited++
		}
		if d.Allowed {
			admitted++
		}
		time.Sleep(gap)
	}
	return waited, admitted
}

// With refresh ahead, steady demand never waits for the store once the
// lease size has settled; without it, every lease's end costs a caller a
// round trip.
func TestRefreshAheadKeepsCallersOffTheStore(t *testing.T) {
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100000, Period: time.Hour}
	for _, refresh := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			x := newExact(time.Now)
			opts := []tiered.Option{tiered.WithLeases(20, 1, 100*time.Millisecond)}
			if refresh {
				opts = append(opts, tiered.WithRefreshAhead(0.5))
			}
			s := newTiered(t, slow{x, time.Millisecond}, opts...)
			waited, admitted := waits(t, s, lim, 2000, 100*time.Microsecond, time.Millisecond)
			st := s.Stats()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if admitted != 2000 {
				t.Fatalf("refresh %v: admitted %d of 2000 under a limit of 100000", refresh, admitted)
			}
			if refresh {
				if waited > 5 || st.Refreshes < 50 {
					t.Errorf("refresh ahead: %d of 2000 requests waited for the store, %d refreshes (Stats %+v); want at most 5 (the first leases) and at least 50", waited, st.Refreshes, st)
				}
			} else if waited < 50 || st.Refreshes != 0 {
				t.Errorf("no refresh: %d of 2000 requests waited for the store, %d refreshes; want at least 50 and 0", waited, st.Refreshes)
			}
			// Everything leased and unspent went back at Close (fixed
			// window returns are whole within the window).
			d, _ := x.AllowN(ctx, "k", lim, 0)
			if want := lim.Rate - admitted; d.Remaining != want {
				t.Errorf("refresh %v: store's Remaining after Close = %d, want %d (the limit less the admissions)", refresh, d.Remaining, want)
			}
		})
	}
}

// A refresh the store denies is not retried on every spend: the key's
// requests go back to the caller's own lease (and the denial cache).
func TestRefreshAheadDeniedDoesNotHammer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newExact(time.Now)
		s := newTiered(t, x, tiered.WithLeases(20, 1, time.Hour), tiered.WithRefreshAhead(0.5))
		defer s.Close()
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 30, Period: time.Hour}
		admitted := 0
		for range 200 {
			d, err := s.AllowN(ctx, "k", lim, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
			synctest.Wait() // let a refresh in flight land
		}
		if admitted != 30 {
			t.Errorf("admitted %d of 200 under a limit of 30", admitted)
		}
		if c := x.calls.Load(); c > 12 {
			t.Errorf("%d calls to the store for 200 requests, 170 of them over the limit; want at most 12", c)
		}
	})
}

// Close gives back the lease taken ahead as well as the current one.
func TestCloseReturnsRefreshedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newExact(time.Now)
		s := newTiered(t, x, tiered.WithLeases(10, 1, time.Hour), tiered.WithRefreshAhead(0.5))
		lim := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1000, Period: time.Hour}
		// Grow the lease (its size follows demand), then spend below half.
		for range 40 {
			if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed {
				t.Fatalf("AllowN = %+v, %v", d, err)
			}
			synctest.Wait()
		}
		st := s.Stats()
		if st.Refreshes == 0 || st.Leased <= 40 {
			t.Fatalf("Stats() = %+v, want refreshes and more leased than spent", st)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if st = s.Stats(); st.Returned != st.Leased-40 {
			t.Errorf("Stats() after Close = %+v, want %d returned (leased - spent)", st, st.Leased-40)
		}
		d, _ := x.AllowN(ctx, "k", lim, 0)
		if d.Remaining != 960 {
			t.Errorf("store's Remaining after Close = %d, want 960", d.Remaining)
		}
	})
}

// Several processes with refresh ahead never exceed the limit together,
// and give everything back at Close.
func TestRefreshAheadProcessesNeverExceedTheLimit(t *testing.T) {
	x := newExact(time.Now)
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 500, Period: time.Hour}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stores := []*tiered.Store{
		newTiered(t, x, tiered.WithLeases(50, 0.2, time.Second), tiered.WithRefreshAhead(0.25)),
		newTiered(t, x, tiered.WithLeases(50, 0.2, time.Second), tiered.WithRefreshAhead(0.75)),
		newTiered(t, x, tiered.WithLeases(50, 0.2, time.Second)),
	}
	for g := range 9 {
		wg.Go(func() {
			s := stores[g%len(stores)]
			for range 200 {
				d, err := s.AllowN(ctx, "k", lim, 1+g%2)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(int64(1 + g%2))
				}
			}
		})
	}
	wg.Wait()
	for _, s := range stores {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}
	if got := admitted.Load(); got > 500 {
		t.Errorf("admitted %d units under a limit of 500", got)
	}
	d, _ := x.AllowN(ctx, "k", lim, 0)
	if want := 500 - int(admitted.Load()); d.Remaining != want {
		t.Errorf("store's Remaining = %d after Close, want %d (500 - admitted)", d.Remaining, want)
	}
}

package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/tiered"
)

var ctx = context.Background()

func TestConformanceDenialCacheOnly(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		m := memstore.New()
		s := newTiered(t, m)
		t.Cleanup(func() { s.Close(); m.Close() })
		return s
	}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
		m := memstore.New(memstore.WithClock(c.Now))
		s := newTiered(t, m, tiered.WithClock(c.Now))
		t.Cleanup(func() { s.Close(); m.Close() })
		return s
	}))
}

// TestConformanceLeases runs the suite on leases over memstore (a
// sluice.Reserver), and over the exact fake of fake_test.go.
func TestConformanceLeases(t *testing.T) {
	t.Run("memstore", func(t *testing.T) {
		sluicetest.Run(t, func(t *testing.T) sluice.Store {
			m := memstore.New()
			s := newTiered(t, m, tiered.WithLeases(64, 0.5, 50*time.Millisecond))
			t.Cleanup(func() { s.Close(); m.Close() })
			return s
		}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
			m := memstore.New(memstore.WithClock(c.Now))
			s := newTiered(t, m, tiered.WithClock(c.Now), tiered.WithLeases(64, 0.5, time.Second))
			t.Cleanup(func() { s.Close(); m.Close() })
			return s
		}), sluicetest.MayDenyEarly())
	})
	// The fake has no AllowMulti: storeOnly hides tiered's pass-through.
	t.Run("fake", func(t *testing.T) {
		sluicetest.Run(t, func(t *testing.T) sluice.Store {
			s := newTiered(t, newExact(time.Now), tiered.WithLeases(64, 0.5, 50*time.Millisecond))
			t.Cleanup(func() { s.Close() })
			return storeOnly{s}
		}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
			s := newTiered(t, newExact(c.Now), tiered.WithClock(c.Now), tiered.WithLeases(64, 0.5, time.Second))
			t.Cleanup(func() { s.Close() })
			return storeOnly{s}
		}), sluicetest.MayDenyEarly())
	})
}

type storeOnly struct{ s sluice.Store }

func (o storeOnly) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	return o.s.AllowN(ctx, key, lim, n)
}

func TestDenialCache(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	x := newExact(clock.Now)
	s := newTiered(t, x, tiered.WithClock(clock.Now))
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second}
	steps := []struct {
		advance   time.Duration
		n         int
		want      sluice.Decision
		wantCalls int64
	}{
		{0, 1, sluice.Decision{Allowed: true, Limit: lim, Remaining: 1, ResetAfter: time.Second}, 1},
		{0, 1, sluice.Decision{Allowed: true, Limit: lim, Remaining: 0, ResetAfter: time.Second}, 2},
		{100 * time.Millisecond, 1, sluice.Decision{Limit: lim, RetryAfter: 900 * time.Millisecond, ResetAfter: 900 * time.Millisecond}, 3},
		// Served from the cache: no call, the wait counts down.
		{400 * time.Millisecond, 1, sluice.Decision{Limit: lim, RetryAfter: 500 * time.Millisecond, ResetAfter: 500 * time.Millisecond}, 3},
		{499 * time.Millisecond, 1, sluice.Decision{Limit: lim, RetryAfter: time.Millisecond, ResetAfter: time.Millisecond}, 3},
		// Another size is not the cached one: the store answers.
		{0, 2, sluice.Decision{Limit: lim, RetryAfter: time.Millisecond, ResetAfter: time.Millisecond}, 4},
		// r has passed: the store answers, and admits.
		{time.Millisecond, 1, sluice.Decision{Allowed: true, Limit: lim, Remaining: 1, ResetAfter: time.Second}, 5},
	}
	for i, st := range steps {
		clock.Advance(st.advance)
		got, err := s.AllowN(ctx, "k", lim, st.n)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("step %d: AllowN(k, %d) mismatch (-want +got):\n%s", i, st.n, diff)
		}
		if c := x.calls.Load(); c != st.wantCalls {
			t.Errorf("step %d: %d shared calls, want %d", i, c, st.wantCalls)
		}
	}
	if st := s.Stats(); st.Local != 2 || st.CachedDenials != 2 || st.Shared != 5 {
		t.Errorf("Stats() = %+v, want 2 local (cached denials), 5 shared", st)
	}
}

func TestLeasesExactForOneProcess(t *testing.T) {
	for _, a := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA} {
		t.Run(a.String(), func(t *testing.T) {
			clock := sluicetest.NewClock(sluicetest.Epoch())
			x := newExact(clock.Now)
			s := newTiered(t, x, tiered.WithClock(clock.Now), tiered.WithLeases(16, 0.5, time.Hour), tiered.WithStampedLeases())
			defer s.Close()
			lim := sluice.Limit{Algorithm: a, Rate: 100, Period: time.Minute}
			for i := range 100 {
				d, err := s.AllowN(ctx, "k", lim, 1)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed || d.Remaining != 99-i {
					t.Fatalf("AllowN #%d = %+v, want admitted with Remaining %d", i, d, 99-i)
				}
			}
			if d, _ := s.AllowN(ctx, "k", lim, 1); d.Allowed {
				t.Errorf("AllowN #101 = %+v, want denied", d)
			}
			st := s.Stats()
			if st.Shared > 20 {
				t.Errorf("Stats() = %+v: %d shared calls for 101 decisions, want leases of up to 16", st, st.Shared)
			}
			if st.Leased != 100 || x.admitted.Load() != 100 {
				t.Errorf("leased %d units, store admitted %d, want 100 and 100", st.Leased, x.admitted.Load())
			}
		})
	}
}

func TestLeaseFallsBackToWhatIsFree(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	x := newExact(clock.Now)
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Minute}
	// Another process takes 7 of 10.
	if d, _ := x.AllowN(ctx, "k", lim, 7); !d.Allowed {
		t.Fatal("setup")
	}
	s := newTiered(t, x, tiered.WithClock(clock.Now), tiered.WithLeases(10, 1, time.Hour), tiered.WithStampedLeases())
	defer s.Close()
	// Grow the lease size: three quick calls.
	admitted := 0
	for range 5 {
		if d, _ := s.AllowN(ctx, "k", lim, 1); d.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("admitted %d with 3 units free in the store, want exactly 3", admitted)
	}
	d, _ := s.AllowN(ctx, "k", lim, 1)
	if d.Allowed || d.RetryAfter != time.Minute {
		t.Errorf("AllowN when full = %+v, want denied with RetryAfter 1m (n's exact wait)", d)
	}
}

func TestFixedWindowLeaseEndsWithItsWindow(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch().Add(900 * time.Millisecond))
	x := newExact(clock.Now)
	s := newTiered(t, x, tiered.WithClock(clock.Now), tiered.WithLeases(50, 1, time.Hour))
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Second}
	s.AllowN(ctx, "k", lim, 1) // k = 1
	s.AllowN(ctx, "k", lim, 1) // demand is high: a lease of 50
	if st := s.Stats(); st.Leased != 51 {
		t.Fatalf("Stats() = %+v, want 51 units leased", st)
	}
	clock.Advance(100 * time.Millisecond) // the next window
	calls := x.calls.Load()
	d, err := s.AllowN(ctx, "k", lim, 1)
	if err != nil || !d.Allowed {
		t.Fatalf("AllowN in the next window = %+v, %v", d, err)
	}
	if x.calls.Load() == calls {
		t.Error("a unit leased in the previous window was spent in the next one")
	}
}

func TestCloseReturnsUnspentUnits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newExact(time.Now)
		s := newTiered(t, x, tiered.WithLeases(20, 1, time.Hour), tiered.WithStampedLeases())
		lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Hour}
		for range 5 {
			s.AllowN(ctx, "k", lim, 1)
		}
		st := s.Stats()
		if st.Leased <= 5 {
			t.Fatalf("Stats() = %+v, want more leased than spent", st)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Every unspent unit goes back; the store credits them less the
		// refill since the lease (none here: no time has passed).
		st = s.Stats()
		if st.Returned != st.Leased-5 {
			t.Errorf("Stats() after Close = %+v, want %d returned", st, st.Leased-5)
		}
		d, _ := x.AllowN(ctx, "k", lim, 0)
		if d.Remaining != 95 {
			t.Errorf("store's Remaining after Close = %d, want 95 (the 5 spent stay counted)", d.Remaining)
		}
		if _, err := s.AllowN(ctx, "k", lim, 1); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("AllowN after Close error = %v, want ErrClosed", err)
		}
	})
}

func TestSweeperReturnsEndedLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newExact(time.Now)
		s := newTiered(t, x, tiered.WithLeases(20, 1, 100*time.Millisecond), tiered.WithStampedLeases())
		defer s.Close()
		lim := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 100, Period: time.Hour}
		for range 3 {
			s.AllowN(ctx, "k", lim, 1)
		}
		leased := s.Stats().Leased
		time.Sleep(125 * time.Millisecond) // the lifetime and one sweep
		synctest.Wait()
		if st := s.Stats(); st.Returned != leased-3 {
			t.Errorf("Stats() = %+v, want %d returned by the sweeper", st, leased-3)
		}
		// The store credited the returned units less the refill since the
		// lease, which the bucket had already gained with time: the 3 spent
		// stay counted, and the refill is counted once.
		if d, _ := x.AllowN(ctx, "k", lim, 0); d.Remaining != 97 {
			t.Errorf("store's Remaining after the sweep = %d, want 97", d.Remaining)
		}
	})
}

func TestLeaseSizeFollowsDemand(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	x := newExact(clock.Now)
	s := newTiered(t, x, tiered.WithClock(clock.Now), tiered.WithLeases(1000, 0.1, time.Second), tiered.WithStampedLeases())
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1_000_000, Period: time.Second}
	// 1000 decisions per second, 1ms apart: demand per lifetime is 1000,
	// and every lease should approach it.
	for range 3000 {
		clock.Advance(time.Millisecond)
		s.AllowN(ctx, "k", lim, 1)
	}
	st := s.Stats()
	if st.Leases > 20 {
		t.Errorf("Stats() = %+v: %d leases for 3000 decisions at 1000/s with 1s leases, want a few", st, st.Leases)
	}
	// Sparse: one every 1.1s, each needing a new lease. The lease halves
	// each time, towards 1.
	var last int64
	for range 12 {
		clock.Advance(1100 * time.Millisecond)
		before := s.Stats().Leased
		s.AllowN(ctx, "k", lim, 1)
		last = s.Stats().Leased - before
	}
	if last > 2 {
		t.Errorf("the 12th sparse decision leased %d units, want the lease to have shrunk to 1 or 2", last)
	}
}

func TestTwoProcessesNeverExceedTheLimit(t *testing.T) {
	x := newExact(time.Now)
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 500, Period: time.Hour}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stores := []*tiered.Store{
		newTiered(t, x, tiered.WithLeases(50, 0.2, time.Second)),
		newTiered(t, x, tiered.WithLeases(50, 0.2, time.Second)),
	}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%2]
			for range 200 {
				d, err := s.AllowN(ctx, "k", lim, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for _, s := range stores {
		s.Close()
	}
	if got := admitted.Load(); got > 500 {
		t.Errorf("admitted %d of 1600 requests under a limit of 500", got)
	}
	// After Close every unspent unit is back: the store counts exactly what
	// was admitted.
	d, _ := x.AllowN(ctx, "k", lim, 0)
	if want := 500 - int(admitted.Load()); d.Remaining != want {
		t.Errorf("store's Remaining = %d after Close, want %d (500 - admitted)", d.Remaining, want)
	}
}

func TestApproximateLocalShareBound(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	x := newExact(clock.Now)
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Minute}
	admitted := 0
	for range 2 {
		s := newTiered(t, x, tiered.WithClock(clock.Now), tiered.WithApproximateLocalShare(0.3))
		defer s.Close()
		for range 20 {
			if d, _ := s.AllowN(ctx, "k", lim, 1); d.Allowed {
				admitted++
			}
		}
	}
	// The documented bound: Rate + the local shares (2 × floor(10×0.3)).
	if admitted != 16 {
		t.Errorf("two processes admitted %d, want exactly 10 + 2×3 = 16 (the documented bound)", admitted)
	}
}

func TestWindowReturnsAreWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newExact(time.Now)
		s := newTiered(t, x, tiered.WithLeases(20, 1, time.Hour))
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}
		for range 5 {
			s.AllowN(ctx, "k", lim, 1)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Returned != st.Leased-5 {
			t.Errorf("Stats() after Close = %+v, want every unspent unit (%d) returned", st, st.Leased-5)
		}
		if d, _ := x.AllowN(ctx, "k", lim, 0); d.Remaining != 95 {
			t.Errorf("store's Remaining after Close = %d, want 95", d.Remaining)
		}
	})
}

func TestSharedErrorsPassThrough(t *testing.T) {
	x := newExact(time.Now)
	x.fail.Store(true)
	for _, opts := range [][]tiered.Option{nil, {tiered.WithLeases(10, 1, time.Second)}} {
		s := newTiered(t, x, opts...)
		_, err := s.AllowN(ctx, "k", sluice.PerSecond(10), 1)
		if !errors.Is(err, errDown) {
			t.Errorf("AllowN with a failing store error = %v, want %v", err, errDown)
		}
		s.Close()
	}
}

func TestMaxKeysFallsBackToTheStore(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	x := newExact(clock.Now)
	s := newTiered(t, x, tiered.WithClock(clock.Now), tiered.WithMaxKeys(1), tiered.WithLeases(10, 1, time.Hour))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}
	// 64 shards hold one key each: 200 keys cannot all have a local state.
	for i := range 200 {
		for range 5 {
			if d, err := s.AllowN(ctx, fmt.Sprint("key", i), lim, 1); err != nil || !d.Allowed {
				t.Fatalf("AllowN(key%d) = %+v, %v", i, d, err)
			}
		}
	}
	st := s.Stats()
	if st.Leases > 64*2 || st.Shared <= 200*2 {
		t.Errorf("Stats() = %+v: want at most 64 keys leased (two leases each), the rest decided by the store", st)
	}
	s.Close()
	if got := x.admitted.Load(); got != 1000 {
		t.Errorf("after Close the store counts %d units net, want exactly the 1000 admitted", got)
	}
}

// countingStore is a plain Store (AllowN alone) that counts its calls.
type countingStore struct {
	s     sluice.Store
	calls atomic.Int64
}

func (c *countingStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	c.calls.Add(1)
	return c.s.AllowN(ctx, key, lim, n)
}

// Over a store that cannot reserve, WithLeases takes no lease: the first
// decision learns it from sluice.ErrReserveUnsupported and is decided by
// AllowN, as is every later one, exactly; what else the store lacks is its
// error, passed on.
func TestLeasesOverAStoreThatCannotReserve(t *testing.T) {
	m := memstore.New()
	defer m.Close()
	plain := &countingStore{s: m}
	s := newTiered(t, plain, tiered.WithLeases(10, 1, time.Minute))
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Hour}
	for i := range 7 {
		d, err := s.AllowN(ctx, "k", lim, 1)
		if err != nil || d.Allowed != (i < 5) || d.Degraded {
			t.Fatalf("decision %d = %+v, %v; want allowed %v, exact", i+1, d, err, i < 5)
		}
	}
	if n := plain.calls.Load(); n < 5 {
		t.Errorf("the store decided %d times, want each admission (no lease)", n)
	}
	if st := s.Stats(); st.Leases != 0 {
		t.Errorf("Stats().Leases = %d, want 0", st.Leases)
	}
	if _, _, err := s.Reserve(ctx, "k", lim, 1); !errors.Is(err, sluice.ErrReserveUnsupported) {
		t.Errorf("Reserve = %v, want ErrReserveUnsupported", err)
	}
	if err := s.Reset(ctx, "k", lim); !errors.Is(err, sluice.ErrResetUnsupported) {
		t.Errorf("Reset = %v, want ErrResetUnsupported", err)
	}
	if _, err := s.AllowMulti(ctx, nil); !errors.Is(err, sluice.ErrMultiUnsupported) {
		t.Errorf("AllowMulti = %v, want ErrMultiUnsupported", err)
	}
	if _, err := s.Acquire(ctx, "p", sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}, "h"); !errors.Is(err, sluice.ErrSemaphoreUnsupported) {
		t.Errorf("Acquire = %v, want ErrSemaphoreUnsupported", err)
	}
}

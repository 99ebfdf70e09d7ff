package tiered_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/tiered"
)

// An invalid option value is an error of New naming the option.
func TestInvalidOptions(t *testing.T) {
	tests := []struct {
		opts []tiered.Option
		want string
	}{
		{[]tiered.Option{tiered.WithLeases(0, 0.5, time.Second)}, "WithLeases(0, 0.5, 1s): want max >= 1"},
		{[]tiered.Option{tiered.WithLeases(10, 0, time.Second)}, "WithLeases(10, 0, 1s)"},
		{[]tiered.Option{tiered.WithLeases(10, 1.5, time.Second)}, "WithLeases(10, 1.5, 1s)"},
		{[]tiered.Option{tiered.WithLeases(10, math.NaN(), time.Second)}, "WithLeases(10, NaN, 1s)"},
		{[]tiered.Option{tiered.WithLeases(10, 0.5, 0)}, "WithLeases(10, 0.5, 0s)"},
		{[]tiered.Option{tiered.WithLeases(10, 0.5, time.Second), tiered.WithRefreshAhead(0)}, "WithRefreshAhead(0): want a low water in (0, 1)"},
		{[]tiered.Option{tiered.WithLeases(10, 0.5, time.Second), tiered.WithRefreshAhead(1)}, "WithRefreshAhead(1)"},
		{[]tiered.Option{tiered.WithRefreshAhead(0.5)}, "WithRefreshAhead needs WithLeases"},
		{[]tiered.Option{tiered.WithStampedLeases()}, "WithStampedLeases needs WithLeases"},
		{[]tiered.Option{tiered.WithApproximateLocalShare(0)}, "WithApproximateLocalShare(0): want a fraction in (0, 1]"},
		{[]tiered.Option{tiered.WithApproximateLocalShare(1.01)}, "WithApproximateLocalShare(1.01)"},
		{[]tiered.Option{tiered.WithMaxKeys(0)}, "WithMaxKeys(0): want >= 1"},
		{[]tiered.Option{tiered.WithReturnTimeout(0)}, "WithReturnTimeout(0s): want > 0"},
		{[]tiered.Option{tiered.WithCloseTimeout(-time.Second)}, "WithCloseTimeout(-1s): want > 0"},
		{[]tiered.Option{tiered.WithLogger(nil)}, "WithLogger(nil)"},
		{[]tiered.Option{tiered.WithClock(nil)}, "WithClock(nil)"},
	}
	m := memstore.New()
	defer m.Close()
	for _, tt := range tests {
		s, err := tiered.New(m, tt.opts...)
		if err == nil || s != nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "tiered: ") {
			t.Errorf("New with invalid options = %v, %v; want an error containing %q", s, err, tt.want)
		}
	}
	if _, err := tiered.New(nil); err == nil {
		t.Error("New(nil) succeeded, want an error")
	}
	s, err := tiered.New(m, tiered.WithLeases(1, 1, time.Nanosecond), tiered.WithRefreshAhead(0.99), tiered.WithApproximateLocalShare(1), tiered.WithMaxKeys(1))
	if err != nil {
		t.Fatalf("New with valid edge values: %v", err)
	}
	s.Close()
}

// degrading is a shared store that answers every call degraded, as
// failover does while its shared store is down: AllowN denies with a long
// RetryAfter; Lease admits and leases nothing, asking for no lease for
// leaseRetry.
type degrading struct {
	allows, leases atomic.Int64
	leaseRetry     time.Duration
}

func (d *degrading) AllowN(_ context.Context, _ string, lim sluice.Limit, n int) (sluice.Decision, error) {
	d.allows.Add(1)
	return sluice.Decision{Limit: lim, RetryAfter: time.Hour, Degraded: true}, nil
}

func (d *degrading) Reserve(_ context.Context, _ string, lim sluice.Limit, _ int) (sluice.Decision, time.Time, error) {
	d.leases.Add(1)
	return sluice.Decision{Limit: lim, Degraded: true, RetryAfter: d.leaseRetry}, time.Time{}, nil
}

func (d *degrading) Return(context.Context, string, sluice.Limit, int, time.Time) error {
	return errors.New("not leased")
}

// A degraded denial is never cached, and a degraded Lease keeps nothing:
// the request is decided by the shared store's AllowN, every time; and no
// lease is asked for again within the degraded Lease's RetryAfter, so each
// of those decisions passes the store once.
func TestDegradedAnswersAreNotKept(t *testing.T) {
	leasing := []tiered.Option{tiered.WithLeases(10, 1, time.Hour), tiered.WithRefreshAhead(0.5)}
	for _, tt := range []struct {
		name       string
		opts       []tiered.Option
		leaseRetry time.Duration
		leases     int64
	}{
		{"DenialCache", nil, 0, 0},
		{"Leases", leasing, 0, 5},
		{"LeasesAfterRetryAfter", leasing, time.Hour, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x := &degrading{leaseRetry: tt.leaseRetry}
			s := newTiered(t, x, tt.opts...)
			lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
			for i := range 5 {
				d, err := s.AllowN(ctx, "k", lim, 1)
				if err != nil || d.Allowed || !d.Degraded || d.RetryAfter != time.Hour {
					t.Errorf("AllowN #%d = %+v, %v; want the store's degraded denial", i, d, err)
				}
			}
			if x.allows.Load() != 5 || x.leases.Load() != tt.leases {
				t.Errorf("store asked AllowN %d times, Lease %d; want 5 and %d", x.allows.Load(), x.leases.Load(), tt.leases)
			}
			if st := s.Stats(); st.Local != 0 || st.CachedDenials != 0 || st.Leases != 0 {
				t.Errorf("Stats() = %+v, want nothing local, cached or leased", st)
			}
			s.Close()
		})
	}
}

// Invalid requests are the shared store's errors, on every path of the
// local tier: no panic, nothing leased, nothing admitted locally.
func TestInvalidRequests(t *testing.T) {
	good := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	tests := []struct {
		name string
		key  string
		lim  sluice.Limit
		n    int
		want error
	}{
		{"empty key", "", good, 1, sluice.ErrInvalidKey},
		{"long key", strings.Repeat("k", sluice.MaxKeyLen+1), good, 1, sluice.ErrInvalidKey},
		{"zero period", "k", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10}, 1, sluice.ErrInvalidLimit},
		{"zero rate", "k", sluice.Limit{Algorithm: sluice.SlidingWindow, Period: time.Second}, 1, sluice.ErrInvalidLimit},
		{"no algorithm", "k", sluice.Limit{Rate: 10, Period: time.Second}, 1, sluice.ErrInvalidLimit},
		// Valid once scaled down to a local share.
		{"rate beyond bounds", "k", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1001, Period: time.Millisecond}, 1, sluice.ErrInvalidLimit},
		{"unknown failure mode", "k", good.WithFailureMode(42), 1, sluice.ErrInvalidLimit},
		{"negative n", "k", good, -1, sluice.ErrInvalidCost},
		{"n over capacity", "k", good, 11, sluice.ErrExceedsCapacity},
	}
	for _, o := range []struct {
		name string
		opts []tiered.Option
	}{
		{"DenialCache", nil},
		{"Leases", []tiered.Option{tiered.WithLeases(10, 1, time.Hour), tiered.WithStampedLeases(), tiered.WithRefreshAhead(0.5)}},
		{"LocalShare", []tiered.Option{tiered.WithApproximateLocalShare(0.5)}},
	} {
		t.Run(o.name, func(t *testing.T) {
			x := newExact(time.Now)
			s := newTiered(t, x, o.opts...)
			defer s.Close()
			// A valid lease of the good limit first, so that the key has
			// a local state.
			if d, err := s.AllowN(ctx, "k", good, 1); err != nil || !d.Allowed {
				t.Fatalf("AllowN(good) = %+v, %v", d, err)
			}
			before := s.Stats()
			for _, tt := range tests {
				for range 3 {
					d, err := s.AllowN(ctx, tt.key, tt.lim, tt.n)
					if !errors.Is(err, tt.want) || d.Allowed {
						t.Errorf("%s: AllowN = %+v, %v; want %v", tt.name, d, err, tt.want)
					}
				}
			}
			if st := s.Stats(); st.Leases != before.Leases || st.Local != before.Local {
				t.Errorf("Stats() = %+v after %+v: an invalid request was leased or decided locally", st, before)
			}
		})
	}
}

// AllowMulti passes through: the shared store validates.
func TestAllowMultiPassesThrough(t *testing.T) {
	m := memstore.New()
	defer m.Close()
	s := newTiered(t, m)
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Hour}
	ds, err := s.AllowMulti(ctx, []sluice.Request{{Key: "a", Limit: lim, N: 1}, {Key: "b", Limit: lim, N: 1}})
	if err != nil || len(ds) != 2 || !ds[0].Allowed || !ds[1].Allowed {
		t.Errorf("AllowMulti = %+v, %v; want both admitted", ds, err)
	}
	if _, err := s.AllowMulti(ctx, []sluice.Request{{Key: "", Limit: lim, N: 1}}); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("AllowMulti with an empty key: %v, want the store's ErrInvalidKey", err)
	}
}

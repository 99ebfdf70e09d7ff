package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func newReserveLimiter(t *testing.T) (*sluice.Limiter, *fakeClock) {
	t.Helper()
	clock := &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	l := sluice.New(memstore.New(memstore.WithClock(clock.Now)))
	t.Cleanup(func() { l.Close() })
	return l, clock
}

func remaining(t *testing.T, l *sluice.Limiter, key string, lim sluice.Limit) int {
	t.Helper()
	d, err := l.AllowN(context.Background(), key, lim.WithCounting(sluice.CountAdmitted), 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

func reserve(t *testing.T, l *sluice.Limiter, key string, lim sluice.Limit, n int) *sluice.Reservation {
	t.Helper()
	r, err := l.Reserve(context.Background(), key, lim, n)
	if err != nil {
		t.Fatalf("Reserve(%q, %v, %d): %v", key, lim, n, err)
	}
	return r
}

func TestReserveSettle(t *testing.T) {
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Minute}
	tests := []struct {
		name       string
		lim        sluice.Limit
		before     int // taken before the reservation
		n, used    int
		wantOK     bool
		wantRemain int
	}{
		{"used less", lim, 0, 10, 4, true, 96},
		{"used exactly", lim, 0, 10, 10, true, 90},
		{"used more: the excess is charged", lim, 0, 10, 30, true, 70},
		{"used beyond the limit: charged all the same", lim, 50, 10, 80, true, 0},
		{"used nothing", lim, 0, 10, 0, true, 100},
		{"denied, work done anyway: all of used charged", lim, 95, 10, 3, false, 2},
		{"denied, no work", lim, 95, 10, 0, false, 5},
		{"counting every hit: denied and counted, then refunded", lim.WithCounting(sluice.CountAll), 95, 10, 0, false, 5},
		{"counting every hit: denied and counted, settled lower", lim.WithCounting(sluice.CountAll), 95, 10, 4, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newReserveLimiter(t)
			if tt.before > 0 {
				if _, err := l.AllowN(ctx, "k", lim, tt.before); err != nil {
					t.Fatal(err)
				}
			}
			r := reserve(t, l, "k", tt.lim, tt.n)
			if got := r.Decision().Allowed; got != tt.wantOK {
				t.Fatalf("Reserve(%d) allowed = %v, want %v (%+v)", tt.n, got, tt.wantOK, r.Decision())
			}
			if err := r.Settle(ctx, tt.used); err != nil {
				t.Fatalf("Settle(%d): %v", tt.used, err)
			}
			if got := remaining(t, l, "k", lim); got != tt.wantRemain {
				t.Errorf("Remaining after Settle(%d) = %d, want %d", tt.used, got, tt.wantRemain)
			}
			// Settle acts once.
			if err := r.Settle(ctx, 0); err != nil {
				t.Fatalf("second Settle: %v", err)
			}
			if got := remaining(t, l, "k", lim); got != tt.wantRemain {
				t.Errorf("Remaining after a second Settle = %d, want %d (unchanged)", got, tt.wantRemain)
			}
		})
	}
}

// TestSettleAtReservationTime: a bucket's refund is worth what the
// reserved units still take from it at the settlement, not their full
// value: it never credits the refill that time has already given back.
func TestSettleAtReservationTime(t *testing.T) {
	ctx := context.Background()
	l, clock := newReserveLimiter(t)
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Second} // one per 100ms
	r := reserve(t, l, "k", lim, 10)
	clock.Advance(500 * time.Millisecond) // 5 refilled
	if got := remaining(t, l, "k", lim); got != 5 {
		t.Fatalf("Remaining = %d, want 5", got)
	}
	if err := r.Settle(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// 8 returned as of the reservation: 3 of them were still taken.
	if got := remaining(t, l, "k", lim); got != 8 {
		t.Errorf("Remaining after Settle(2) = %d, want 8", got)
	}
}

func TestSettleInvalid(t *testing.T) {
	ctx := context.Background()
	l, _ := newReserveLimiter(t)
	r := reserve(t, l, "k", sluice.PerSecond(10), 1)
	for _, used := range []int{-1, sluice.MaxCharge + 1} {
		var le *sluice.LimitError
		if err := r.Settle(ctx, used); !errors.As(err, &le) || le.Field != "N" {
			t.Errorf("Settle(%d) = %v, want a *LimitError on N", used, err)
		}
	}
	if err := r.Settle(ctx, 1); err != nil { // an invalid used does not settle
		t.Errorf("Settle(1) after invalid ones: %v", err)
	}
}

func TestSettleSlidingLog(t *testing.T) {
	ctx := context.Background()
	l, _ := newReserveLimiter(t)
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: time.Minute}
	r := reserve(t, l, "k", lim, 2)
	if err := r.Settle(ctx, 4); err != nil {
		t.Fatalf("Settle(4) within the Rate: %v", err)
	}
	if got := remaining(t, l, "k", lim); got != 1 {
		t.Fatalf("Remaining = %d, want 1", got)
	}
	r = reserve(t, l, "k", lim, 1)
	if err := r.Settle(ctx, 3); !errors.Is(err, sluice.ErrExceedsCapacity) {
		t.Errorf("Settle(3) beyond the log's Rate = %v, want ErrExceedsCapacity", err)
	}
}

// storeOnly hides every ability of a store but AllowN.
type storeOnly struct{ sluice.Store }

func TestReserveNeedsLeaser(t *testing.T) {
	ctx := context.Background()
	l := sluice.New(storeOnly{memstore.New()})
	defer l.Close()
	if _, err := l.Reserve(ctx, "k", sluice.PerSecond(1), 1); !errors.Is(err, sluice.ErrReserveUnsupported) {
		t.Errorf("Reserve on a store that cannot lease = %v, want ErrReserveUnsupported", err)
	}
	if err := l.Refund(ctx, "k", sluice.PerSecond(1), 1); !errors.Is(err, sluice.ErrReserveUnsupported) {
		t.Errorf("Refund on a store that cannot lease = %v, want ErrReserveUnsupported", err)
	}
}

// noLease is a Leaser whose Lease cannot lease, as failover's while its
// shared store is down: Reserve then decides with AllowN.
type noLease struct{ *memstore.Store }

func (s noLease) Reserve(_ context.Context, _ string, lim sluice.Limit, _ int) (sluice.Decision, time.Time, error) {
	return sluice.Decision{Limit: lim, Degraded: true, RetryAfter: time.Second}, time.Time{}, nil
}

func TestReserveWithoutLease(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	l := sluice.New(noLease{memstore.New(memstore.WithClock(clock.Now))})
	defer l.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Minute}
	r := reserve(t, l, "k", lim, 6)
	if !r.Decision().Allowed || r.Decision().Remaining != 4 {
		t.Fatalf("Reserve without a lease = %+v, want allowed by AllowN, 4 left", r.Decision())
	}
	if err := r.Settle(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, l, "k", lim); got != 9 {
		t.Errorf("Remaining after Settle(1) = %d, want 9 (refunded at the store's now)", got)
	}
}

func TestRefund(t *testing.T) {
	ctx := context.Background()
	l, _ := newReserveLimiter(t)
	lim := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 10, Period: time.Minute}
	if err := l.Refund(ctx, "k", lim, 5); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, l, "k", lim); got != 10 {
		t.Fatalf("Remaining after a refund to an untouched key = %d, want 10", got)
	}
	if _, err := l.AllowN(ctx, "k", lim.WithCounting(sluice.CountAll), 25); err != nil {
		t.Fatal(err)
	}
	if err := l.Refund(ctx, "k", lim, 20); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, l, "k", lim); got != 5 {
		t.Errorf("Remaining after charging 25 and refunding 20 = %d, want 5", got)
	}
}

func TestWaitRefusesCountAll(t *testing.T) {
	l, _ := newReserveLimiter(t)
	var le *sluice.LimitError
	_, err := l.Wait(context.Background(), "k", sluice.PerSecond(1).WithCounting(sluice.CountAll), 1)
	if !errors.As(err, &le) || le.Field != "Counting" {
		t.Errorf("Wait on a limit counting every hit = %v, want a *LimitError on Counting", err)
	}
}

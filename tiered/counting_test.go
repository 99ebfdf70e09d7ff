package tiered_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/tiered"
)

// TestCountAllReachesShared: with leases and the denial cache on, every
// decision of a limit that counts every hit is a shared call, denied ones
// included, and every charge is counted there.
func TestCountAllReachesShared(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	x := newExact(clock.Now)
	s := newTiered(t, x, tiered.WithClock(clock.Now), tiered.WithLeases(64, 0.5, time.Second))
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Minute, Counting: sluice.CountAll}
	for i := range 20 {
		d, err := s.AllowN(ctx, "k", lim, 3)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 3; d.Allowed != want {
			t.Fatalf("charge %d: %+v, want allowed %v", i, d, want)
		}
	}
	if c := x.calls.Load(); c != 20 {
		t.Errorf("%d shared calls for 20 charges, want 20", c)
	}
	if got := x.admitted.Load(); got != 60 {
		t.Errorf("shared store counted %d, want all 60 charged", got)
	}
	if st := s.Stats(); st.Local != 0 || st.Leases != 0 {
		t.Errorf("Stats() = %+v, want nothing decided locally, no leases", st)
	}
}

// TestReturnDropsCachedDenial: a refund through the tiered store is seen by
// the next request at once, not after a cached denial's wait.
func TestReturnDropsCachedDenial(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	x := newExact(clock.Now)
	s := newTiered(t, x, tiered.WithClock(clock.Now))
	defer s.Close()
	var _ sluice.Reserver = s
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Minute}
	for range 3 {
		if _, err := s.AllowN(ctx, "k", lim, 1); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := s.AllowN(ctx, "k", lim, 1); d.Allowed || s.Stats().CachedDenials != 1 {
		t.Fatalf("AllowN on a full key = %+v (stats %+v), want a cached denial", d, s.Stats())
	}
	if err := s.Return(ctx, "k", lim, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.AllowN(ctx, "k", lim, 1); !d.Allowed {
		t.Fatalf("AllowN after a refund = %+v, want allowed at once", d)
	}
}

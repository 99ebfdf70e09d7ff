package tiered_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/tiered"
)

// The local tier allocates nothing: a lease spend and a cached denial.
func TestLocalDecisionsDoNotAllocate(t *testing.T) {
	m := memstore.New()
	defer m.Close()
	s := newTiered(t, m, tiered.WithLeases(1_000_000, 1, time.Hour))
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1_000_000_000, Period: 24 * time.Hour}
	for range 3 { // grow the lease
		s.AllowN(ctx, "k", lim, 1)
	}
	if n := testing.AllocsPerRun(1000, func() { s.AllowN(ctx, "k", lim, 1) }); n != 0 {
		t.Errorf("a lease spend allocates %v times, want 0", n)
	}
	full := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: 24 * time.Hour}
	s.AllowN(ctx, "d", full, 1)
	if d, _ := s.AllowN(ctx, "d", full, 1); d.Allowed {
		t.Fatal("setup: not denied")
	}
	if n := testing.AllocsPerRun(1000, func() { s.AllowN(ctx, "d", full, 1) }); n != 0 {
		t.Errorf("a cached denial allocates %v times, want 0", n)
	}
	if st := s.Stats(); st.Local < 2000 {
		t.Errorf("Stats() = %+v, want the runs served locally", st)
	}
}

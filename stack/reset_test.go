package stack_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/stack"
	"github.com/sluicehq/sluice/tiered"
)

// TestResetThroughTheLayers: a reset reaches the shared store through the
// local tier (its lease dropped, not given back) and failover.
func TestResetThroughTheLayers(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewClock(sluicetest.Epoch())
	m := memstore.New(memstore.WithClock(clock.Now))
	t.Cleanup(func() { m.Close() })
	s := mustNew(t, m, stack.WithFailover(failover.WithClock(clock.Now)),
		stack.WithTiered(tiered.WithClock(clock.Now), tiered.WithLeases(10, 0.5, time.Hour)))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 20, Period: 24 * time.Hour}
	for range 2 { // the second leases 10
		if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed {
			t.Fatalf("AllowN = %+v, %v", d, err)
		}
	}
	if err := s.Reset(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	if d, _ := m.AllowN(ctx, "k", lim, 0); d.Remaining != 20 {
		t.Errorf("shared Remaining after Reset = %d, want 20", d.Remaining)
	}
	admitted := 0
	for range 40 {
		if d, _ := s.AllowN(ctx, "k", lim, 1); d.Allowed {
			admitted++
		}
	}
	if admitted != 20 {
		t.Errorf("admitted %d of 40 after Reset, want 20", admitted)
	}
}

// TestResetUnsupported: over a store that cannot reset, with or without
// the local tier, Reset says so.
func TestResetUnsupported(t *testing.T) {
	m := memstore.New()
	t.Cleanup(func() { m.Close() })
	for _, opts := range [][]stack.Option{nil, {stack.WithTiered()}} {
		s := mustNew(t, struct{ sluice.Store }{m}, opts...)
		if err := s.Reset(context.Background(), "k", sluice.PerSecond(1)); !errors.Is(err, sluice.ErrResetUnsupported) {
			t.Errorf("Reset = %v, want ErrResetUnsupported", err)
		}
	}
}

package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/sluicetest"
)

// Under FailUncounted each request is decided as if nothing had been
// counted for its key, and nothing is counted: the same request gets the
// same answer every time, within the capacity admitted, beyond it denied.
func TestFailUncounted(t *testing.T) {
	ctx := context.Background()
	start := sluicetest.Epoch().Add(20 * time.Second) // 40s left in the minute
	clock := sluicetest.NewClock(start)
	f := newFaulty(t)
	f.mode.Store(failing)
	obs := &counting{}
	s := mustNew(t, f, failover.WithDefaultMode(sluice.FailUncounted), failover.WithStartOpen(nil),
		failover.WithProbeInterval(time.Hour), failover.WithClock(clock.Now), failover.WithObserver(obs))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Minute}
	charge := lim.WithCounting(sluice.CountAll)
	tests := []struct {
		name string
		lim  sluice.Limit
		n    int
		want sluice.Decision
	}{
		{"3 of 5", lim, 3, sluice.Decision{Allowed: true, Remaining: 2, ResetAfter: 40 * time.Second}},
		{"3 of 5 again", lim, 3, sluice.Decision{Allowed: true, Remaining: 2, ResetAfter: 40 * time.Second}},
		{"a peek", lim, 0, sluice.Decision{Allowed: true, Remaining: 5}},
		{"a charge of 5", charge, 5, sluice.Decision{Allowed: true, Remaining: 0, ResetAfter: 40 * time.Second}},
		{"a charge of 6", charge, 6, sluice.Decision{Remaining: 0, RetryAfter: 40 * time.Second, ResetAfter: 40 * time.Second}},
		{"a charge of 0", charge, 0, sluice.Decision{Allowed: true, Remaining: 5}},
	}
	for _, tt := range tests {
		d, err := s.AllowN(ctx, "k", tt.lim, tt.n)
		want := tt.want
		want.Limit, want.Degraded = tt.lim, true
		if err != nil || d != want {
			t.Errorf("%s: AllowN = %+v, %v; want %+v", tt.name, d, err, want)
		}
	}
	if obs.degraded != len(tests) || obs.allowed != len(tests)-1 {
		t.Errorf("Observer told %d degraded, %d allowed; want %d, %d", obs.degraded, obs.allowed, len(tests), len(tests)-1)
	}
	// Nothing was counted, in the shared store or locally.
	f.mode.Store(healthy)
	if d, err := f.Store.AllowN(ctx, "k", lim, 0); err != nil || d.Remaining != 5 {
		t.Errorf("the key after the outage = %+v, %v; want untouched", d, err)
	}
}

// An AllowMulti under FailUncounted is decided as memstore's AllowMulti
// decides untouched keys: a charge beyond its capacity denies the call,
// and the others become peeks of their untouched state.
func TestFailUncountedMulti(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewClock(sluicetest.Epoch())
	f := newFaulty(t)
	f.mode.Store(failing)
	s := mustNew(t, f, failover.WithStartOpen(nil), failover.WithProbeInterval(time.Hour), failover.WithClock(clock.Now))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Minute, FailureMode: sluice.FailUncounted}
	charge := lim.WithCounting(sluice.CountAll)
	ds, err := s.AllowMulti(ctx, []sluice.Request{{Key: "a", Limit: lim, N: 2}, {Key: "b", Limit: charge, N: 7}, {Key: "c", Limit: charge, N: 1}})
	if err != nil {
		t.Fatal(err)
	}
	want := []sluice.Decision{
		{Limit: lim, Degraded: true, Remaining: 5, ResetAfter: 0},
		{Limit: charge, Degraded: true, RetryAfter: time.Minute, ResetAfter: time.Minute},
		{Limit: charge, Degraded: true, Remaining: 4, ResetAfter: time.Minute},
	}
	if diff := cmp.Diff(want, ds); diff != "" {
		t.Errorf("AllowMulti (-want +got):\n%s", diff)
	}
	ds, err = s.AllowMulti(ctx, []sluice.Request{{Key: "a", Limit: lim, N: 2}, {Key: "a", Limit: lim, N: 3}})
	if err != nil {
		t.Fatal(err)
	}
	want = []sluice.Decision{
		{Allowed: true, Limit: lim, Degraded: true, Remaining: 3, ResetAfter: time.Minute},
		{Allowed: true, Limit: lim, Degraded: true, Remaining: 0, ResetAfter: time.Minute},
	}
	if diff := cmp.Diff(want, ds); diff != "" {
		t.Errorf("AllowMulti on one key (-want +got):\n%s", diff)
	}
}

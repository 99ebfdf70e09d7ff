package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
)

// TestCountAllDegraded: while the shared store is down, a limit that counts
// every hit is charged to the strict local share under FailOpen (a charge
// above the share's capacity recorded and denied, a cost of 0 then
// denied), and denied, a cost of 0 included, under FailClosed. A refund is
// dropped with ErrBreakerOpen.
func TestCountAllDegraded(t *testing.T) {
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour, Counting: sluice.CountAll}
	f := newFaulty(t)
	f.mode.Store(failing)
	clock := time.Unix(1_700_000_000, 0)
	s := mustNew(t, f, failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour),
		failover.WithClock(func() time.Time { return clock }), failover.WithReplicas(4))
	s.AllowN(ctx, "open-it", lim, 1)

	open := lim.WithFailureMode(sluice.FailOpen) // a local share of 25
	steps := []struct {
		n       int
		allowed bool
		left    int
	}{
		{20, true, 5},
		{10, false, 0}, // 30 counted locally
		{0, false, 0},  // in debt
	}
	for _, st := range steps {
		d, err := s.AllowN(ctx, "k", open, st.n)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Degraded || d.Allowed != st.allowed || d.Remaining != st.left || d.Limit != open {
			t.Fatalf("AllowN(%d) degraded, FailOpen = %+v, want allowed %v, Remaining %d, Degraded, the request's limit", st.n, d, st.allowed, st.left)
		}
	}
	if d, err := s.AllowN(ctx, "big", open, 1000); err != nil || d.Allowed || !d.Degraded {
		t.Fatalf("AllowN(1000) over the local capacity = %+v, %v, want a degraded denial", d, err)
	}
	closed := lim.WithFailureMode(sluice.FailClosed)
	if d, err := s.AllowN(ctx, "k2", closed, 0); err != nil || d.Allowed || !d.Degraded {
		t.Fatalf("AllowN(0) degraded, FailClosed = %+v, %v, want denied", d, err)
	}
	if err := s.Return(ctx, "k", open, 10, time.Time{}); !errors.Is(err, failover.ErrBreakerOpen) {
		t.Fatalf("Return while degraded = %v, want ErrBreakerOpen (dropped)", err)
	}
}

package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

func (f *faulty) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.Store.Reset(ctx, key, lim)
}

// TestResetPassesThrough: a healthy store is reset through failover.
func TestResetPassesThrough(t *testing.T) {
	ctx := context.Background()
	f := newFaulty(t)
	s := mustNew(t, f)
	if d, _ := s.AllowN(ctx, "k", perSec, 10); !d.Allowed {
		t.Fatalf("AllowN(10) = %+v", d)
	}
	if err := s.Reset(ctx, "k", perSec); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if d, _ := f.Store.AllowN(ctx, "k", perSec, 0); d.Remaining != 10 {
		t.Errorf("shared Remaining after Reset = %d, want 10", d.Remaining)
	}
	if got := s.Stats().SharedCalls; got != 2 {
		t.Errorf("SharedCalls = %d, want 2 (the AllowN and the Reset)", got)
	}
}

// TestResetDegraded: with the breaker open, Reset resets the local share
// (a FailOpen key admits its share again) and returns ErrBreakerOpen
// without calling the shared store; a failed call is ErrUnavailable; an
// invalid request is an error naming the field, whatever the breaker.
func TestResetDegraded(t *testing.T) {
	ctx := context.Background()
	f := newFaulty(t)
	clock := time.Unix(1_700_000_000, 0)
	// Rate 10 over 20 replicas: the share is 1 per 2 Periods, a longer
	// Period than the limit's, which the reset must name.
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}.WithFailureMode(sluice.FailOpen)
	s := mustNew(t, f, failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour),
		failover.WithReplicas(20), failover.WithClock(func() time.Time { return clock }))
	f.mode.Store(failing)
	if err := s.Reset(ctx, "k", lim); !errors.Is(err, failover.ErrUnavailable) || errors.Is(err, failover.ErrBreakerOpen) {
		t.Fatalf("Reset on a failing store = %v, want ErrUnavailable (the call failed)", err)
	}
	calls := f.calls.Load()
	if d, _ := s.AllowN(ctx, "k", lim, 1); !d.Allowed || !d.Degraded {
		t.Fatalf("degraded AllowN = %+v, want the local share's one admission", d)
	}
	if d, _ := s.AllowN(ctx, "k", lim, 1); d.Allowed {
		t.Fatalf("second degraded AllowN = %+v, want denied (share used up)", d)
	}
	if err := s.Reset(ctx, "k", lim); !errors.Is(err, failover.ErrBreakerOpen) {
		t.Errorf("Reset with the breaker open = %v, want ErrBreakerOpen", err)
	}
	if got := f.calls.Load(); got != calls {
		t.Errorf("Reset with the breaker open called the shared store (%d calls, want %d)", got, calls)
	}
	if d, _ := s.AllowN(ctx, "k", lim, 1); !d.Allowed || !d.Degraded {
		t.Errorf("degraded AllowN after Reset = %+v, want admitted (the local share reset)", d)
	}
	var le *sluice.LimitError
	if err := s.Reset(ctx, "", lim); !errors.As(err, &le) || le.Field != "Key" {
		t.Errorf("Reset(\"\") with the breaker open = %v, want a *LimitError on Key", err)
	}
}

// TestResetUnsupported: over a store that cannot reset, Reset says so.
func TestResetUnsupported(t *testing.T) {
	m := memstore.New()
	t.Cleanup(func() { m.Close() })
	s := mustNew(t, storeOnly{m})
	if err := s.Reset(context.Background(), "k", perSec); !errors.Is(err, sluice.ErrResetUnsupported) {
		t.Errorf("Reset = %v, want ErrResetUnsupported", err)
	}
}

// storeOnly hides every method but AllowN.
type storeOnly struct{ sluice.Store }

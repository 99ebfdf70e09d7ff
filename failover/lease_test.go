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

var hourly = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}

// Lease and Return pass through to a healthy shared store.
func TestLeasePassesThrough(t *testing.T) {
	f := newFaulty(t)
	s := mustNew(t, f, failover.WithTimeout(time.Minute))
	d, at, err := s.Reserve(ctx0, "k", hourly, 4)
	if err != nil || !d.Allowed || d.Degraded || d.Remaining != 6 || at.IsZero() {
		t.Fatalf("Lease(4) = %+v, %v, %v; want admitted by the store, Remaining 6", d, at, err)
	}
	if err := s.Return(ctx0, "k", hourly, 4, at); err != nil {
		t.Fatalf("Return(4): %v", err)
	}
	if d, _ := s.AllowN(ctx0, "k", hourly, 0); d.Remaining != 10 {
		t.Errorf("peek after the return = %+v, want Remaining 10", d)
	}
	if _, _, err := s.Reserve(ctx0, "", hourly, 1); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("Lease with an empty key: %v, want the store's ErrInvalidKey", err)
	}
	if st := s.Stats(); st.SharedCalls != 4 || st.SharedErrors != 0 || st.Degraded != 0 {
		t.Errorf("Stats() = %+v, want 4 shared calls, no failure", st)
	}
}

// A Lease that the shared store cannot answer admits and leases nothing: a
// degraded non-decision with a zero time and no error, not counted as a
// degraded decision; a Return while the breaker is open is ErrBreakerOpen,
// without a call.
func TestLeaseDegraded(t *testing.T) {
	f := newFaulty(t)
	obs := &counting{}
	s := mustNew(t, f, failover.WithFailureThreshold(2), failover.WithProbeInterval(time.Hour), failover.WithObserver(obs))
	f.mode.Store(failing)
	for i := range 3 { // a failed call, a failed call that opens, the breaker open
		d, at, err := s.Reserve(ctx0, "k", hourly, 3)
		if err != nil || d.Allowed || !d.Degraded || !at.IsZero() || d.Limit != hourly || d.RetryAfter != time.Hour {
			t.Errorf("Lease #%d on a failing store = %+v, %v, %v; want degraded, not allowed, RetryAfter the probe interval, zero time, no error", i, d, at, err)
		}
	}
	if got := f.calls.Load(); got != 2 {
		t.Errorf("store called %d times, want 2 (then the breaker is open)", got)
	}
	if err := s.Return(ctx0, "k", hourly, 3, time.Now()); !errors.Is(err, failover.ErrBreakerOpen) {
		t.Errorf("Return with the breaker open: %v, want ErrBreakerOpen", err)
	}
	if got := f.calls.Load(); got != 2 {
		t.Errorf("Return with the breaker open called the store (%d calls)", got)
	}
	if st := s.Stats(); st.SharedCalls != 2 || st.SharedErrors != 2 || st.Degraded != 0 || obs.degraded != 0 {
		t.Errorf("Stats() = %+v, observer %d degraded; want 2 failed calls, no degraded decision", st, obs.degraded)
	}
}

// A failed Return is an error wrapping ErrUnavailable and counts towards
// the breaker.
func TestReturnFailure(t *testing.T) {
	f := newFaulty(t)
	s := mustNew(t, f, failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour))
	_, at, err := s.Reserve(ctx0, "k", hourly, 2)
	if err != nil {
		t.Fatal(err)
	}
	f.mode.Store(failing)
	if err := s.Return(ctx0, "k", hourly, 2, at); !errors.Is(err, failover.ErrUnavailable) || !errors.Is(err, errBoom) {
		t.Errorf("Return on a failing store: %v, want ErrUnavailable wrapping the cause", err)
	}
	if s.Ready() {
		t.Error("breaker closed after a failed Return with threshold 1")
	}
}

// A shared store that cannot reserve: Reserve and Return report it
// (sluice.ErrReserveUnsupported), which is not a failure of the store.
func TestReserveWithoutReserver(t *testing.T) {
	s := mustNew(t, onlyStore{memstore.New()})
	d, at, err := s.Reserve(context.Background(), "k", hourly, 1)
	if !errors.Is(err, sluice.ErrReserveUnsupported) || d.Allowed || !at.IsZero() {
		t.Errorf("Reserve over a plain Store = %+v, %v, %v; want sluice.ErrReserveUnsupported", d, at, err)
	}
	if err := s.Return(context.Background(), "k", hourly, 1, at); !errors.Is(err, sluice.ErrReserveUnsupported) {
		t.Errorf("Return over a plain Store = %v, want sluice.ErrReserveUnsupported", err)
	}
	if st := s.Stats(); st.SharedErrors != 0 || st.Open {
		t.Errorf("Stats() = %+v, want no shared error: a capability the store lacks is not its failure", st)
	}
}

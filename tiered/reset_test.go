package tiered_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/tiered"
)

// heldLease is a memstore whose gate-th Lease is decided and then held
// until released: a lease decided before a reset and answered after it.
type heldLease struct {
	*memstore.Store
	gate int64
	n    atomic.Int64
	hold
}

func (h *heldLease) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	d, at, err := h.Store.Reserve(ctx, key, lim, n)
	if h.n.Add(1) == h.gate {
		h.wait()
	}
	return d, at, err
}

// admitAll counts the admissions of s on key until the first denial
// (at most max).
func admitAll(t *testing.T, s sluice.Store, key string, lim sluice.Limit, max int) int {
	t.Helper()
	for i := range max {
		d, err := s.AllowN(ctx, key, lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return i
		}
	}
	return max
}

// TestResetDropsLocalState: after a reset the key admits its capacity
// again, exactly (its old lease is neither spent nor given back, which
// would credit the fresh key), and its cached denial is gone.
func TestResetDropsLocalState(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	m := memstore.New(memstore.WithClock(clock.Now))
	defer m.Close()
	s := newTiered(t, m, tiered.WithClock(clock.Now), tiered.WithLeases(10, 0.5, time.Hour))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 20, Period: 24 * time.Hour}
	// Two requests: the second takes a lease of 10, leaving 9 units here.
	for range 2 {
		if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed {
			t.Fatalf("AllowN = %+v, %v", d, err)
		}
	}
	if got := admitAll(t, s, "k", lim, 100); got != 18 {
		t.Fatalf("admitted %d more, want 18 (a cached denial follows)", got)
	}
	if err := s.Reset(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	if got := admitAll(t, s, "k", lim, 100); got != 20 {
		t.Errorf("admitted %d after Reset, want the capacity, 20", got)
	}
}

// TestResetLeaseNotGivenBack: the units of a lease held at a reset were
// deleted with the state; given back later, they would credit the fresh
// key what other processes counted on it.
func TestResetLeaseNotGivenBack(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	m := memstore.New(memstore.WithClock(clock.Now))
	defer m.Close()
	s := newTiered(t, m, tiered.WithClock(clock.Now), tiered.WithLeases(10, 0.5, time.Hour))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 20, Period: 24 * time.Hour}
	for range 2 { // the second takes a lease of 10, leaving 9 units here
		if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed {
			t.Fatalf("AllowN = %+v, %v", d, err)
		}
	}
	if err := s.Reset(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	if d, _ := m.AllowN(ctx, "k", lim, 5); !d.Allowed { // another process
		t.Fatalf("shared AllowN(5) after the reset = %+v", d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d, _ := m.AllowN(ctx, "k", lim, 0); d.Remaining != 15 {
		t.Errorf("shared Remaining after Close = %d, want 15: the lease from before the reset was given back (stats %+v)", d.Remaining, s.Stats())
	}
}

// TestLeaseRacingResetNotKept: a lease decided before a reset and answered
// after it is not kept: its units were deleted with the state, and
// spending them would admit more than the capacity of the fresh key.
func TestLeaseRacingResetNotKept(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	m := memstore.New(memstore.WithClock(clock.Now))
	defer m.Close()
	h := &heldLease{Store: m, gate: 2, hold: newHold()}
	s := newTiered(t, h, tiered.WithClock(clock.Now), tiered.WithLeases(10, 0.5, time.Hour))
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 20, Period: 24 * time.Hour}
	if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed {
		t.Fatalf("AllowN = %+v, %v", d, err)
	}
	done := make(chan sluice.Decision)
	go func() {
		d, _ := s.AllowN(ctx, "k", lim, 1) // leases 10, answered after the reset
		done <- d
	}()
	<-h.entered
	if err := s.Reset(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	if d := <-done; !d.Allowed {
		t.Fatalf("the request decided before the reset: %+v, want allowed", d)
	}
	if got := admitAll(t, s, "k", lim, 100); got != 20 {
		t.Errorf("admitted %d after the reset, want 20: a lease from before it was kept (stats %+v)", got, s.Stats())
	}
}

// heldAllowN is a memstore whose first AllowN is decided and then held
// until released.
type heldAllowN struct {
	*memstore.Store
	once sync.Once
	hold
}

func (h *heldAllowN) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	d, err := h.Store.AllowN(ctx, key, lim, n)
	h.once.Do(h.wait)
	return d, err
}

// TestDenialRacingResetNotCached: a denial decided while a reset of its
// key was on its way may predate the reset, and is not cached, whether
// the reset began before the denial was sent or after.
func TestDenialRacingResetNotCached(t *testing.T) {
	for _, first := range []string{"denial", "reset"} {
		t.Run(first+" first", func(t *testing.T) {
			clock := sluicetest.NewClock(sluicetest.Epoch())
			m := memstore.New(memstore.WithClock(clock.Now))
			defer m.Close()
			if d, _ := m.AllowN(ctx, "k", daily, 2); !d.Allowed {
				t.Fatal(d)
			}
			var s *tiered.Store
			var rs sluice.Resetter = m
			if first == "reset" {
				// The shared reset is held: the denial is sent and
				// answered while it is on its way.
				hr := &heldReset{Store: m, hold: newHold()}
				rs = hr
				s = newTiered(t, hr, tiered.WithClock(clock.Now))
				go func() {
					<-hr.entered
					d, _ := s.AllowN(ctx, "k", daily, 1) // denied by the full key, before the reset applies
					if d.Allowed {
						t.Errorf("denial racing the reset: %+v, want denied", d)
					}
					close(hr.release)
				}()
				if err := s.Reset(ctx, "k", daily); err != nil {
					t.Fatal(err)
				}
			} else {
				h := &heldAllowN{Store: m, hold: newHold()}
				s = newTiered(t, h, tiered.WithClock(clock.Now))
				denied := make(chan sluice.Decision)
				go func() {
					d, _ := s.AllowN(ctx, "k", daily, 1)
					denied <- d
				}()
				<-h.entered
				if err := s.Reset(ctx, "k", daily); err != nil {
					t.Fatal(err)
				}
				close(h.release)
				if d := <-denied; d.Allowed {
					t.Fatalf("the request decided before the reset: %+v, want denied", d)
				}
			}
			_ = rs
			defer s.Close()
			if d, err := s.AllowN(ctx, "k", daily, 1); err != nil || !d.Allowed {
				t.Fatalf("after the reset: %+v, %v (stats %+v); want admitted, not a denial cached from before it", d, err, s.Stats())
			}
		})
	}
}

// heldReset is a memstore whose Reset waits, before applying, until
// released.
type heldReset struct {
	*memstore.Store
	hold
}

func (h *heldReset) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	h.wait()
	return h.Store.Reset(ctx, key, lim)
}

// TestResetUnsupported: over a store that cannot reset, Reset says so.
func TestResetUnsupported(t *testing.T) {
	s := newTiered(t, newExact(time.Now))
	defer s.Close()
	if err := s.Reset(ctx, "k", daily); !errors.Is(err, sluice.ErrResetUnsupported) {
		t.Errorf("Reset over %T = %v, want ErrResetUnsupported", newExact(time.Now), err)
	}
}

// TestResetLocalShare: the local share's count of the key is reset too.
func TestResetLocalShare(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	m := memstore.New(memstore.WithClock(clock.Now))
	defer m.Close()
	s := newTiered(t, m, tiered.WithClock(clock.Now), tiered.WithApproximateLocalShare(0.5))
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: 24 * time.Hour}
	admitAll(t, s, "k", lim, 100) // the local share and the shared store, both used up
	before := s.Stats().Local
	if err := s.Reset(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	if got := admitAll(t, s, "k", lim, 5); got != 5 {
		t.Fatalf("admitted %d after Reset, want 5", got)
	}
	if got := s.Stats().Local - before; got != 5 {
		t.Errorf("%d of 5 admissions after Reset came from the local share, want 5 (its count reset)", got)
	}
}

// TestRefreshRacingResetNotKept: a lease taken ahead (refresh) decided
// before a reset and answered after it is neither kept nor given back,
// even when the key has a new entry by then.
func TestRefreshRacingResetNotKept(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	m := memstore.New(memstore.WithClock(clock.Now))
	defer m.Close()
	// Leases 1 and 2 are the callers'; the third, taken ahead, is held.
	h := &heldLease{Store: m, gate: 3, hold: newHold()}
	s := newTiered(t, h, tiered.WithClock(clock.Now), tiered.WithLeases(10, 0.5, time.Hour), tiered.WithRefreshAhead(0.5))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 40, Period: 24 * time.Hour}
	// 1, then 1 of a lease of 10, then 4 more: 5 left, the low water.
	for range 6 {
		if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed {
			t.Fatalf("AllowN = %+v, %v", d, err)
		}
	}
	<-h.entered // the refresh of 10 was decided: 21 counted
	if err := s.Reset(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed { // a new entry, 1 counted
		t.Fatalf("AllowN after Reset = %+v, %v", d, err)
	}
	close(h.release)
	if err := s.Close(); err != nil { // waits for the refresh, returns what is kept
		t.Fatal(err)
	}
	if d, _ := m.AllowN(ctx, "k", lim, 0); d.Remaining != 39 || s.Stats().Refreshes != 1 {
		t.Errorf("shared Remaining after Close = %d, want 39 (and one refresh): the refresh from before the reset was kept and given back (stats %+v)", d.Remaining, s.Stats())
	}
}

// resetThenHold is a memstore whose Reset applies and then waits until
// released: the shared state is fresh while the local tier has not yet
// dropped its own.
type resetThenHold struct {
	*memstore.Store
	hold
}

func (h *resetThenHold) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	err := h.Store.Reset(ctx, key, lim)
	h.wait()
	return err
}

// TestSweepDuringResetGivesNothingBack: a sweep while a reset is on its
// way does not give back the leases the reset is about to drop (the fresh
// key would be credited what another process counted on it).
func TestSweepDuringResetGivesNothingBack(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	m := memstore.New(memstore.WithClock(clock.Now))
	defer m.Close()
	h := &resetThenHold{Store: m, hold: newHold()}
	s := newTiered(t, h, tiered.WithClock(clock.Now), tiered.WithLeases(10, 0.5, time.Second))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 20, Period: 24 * time.Hour}
	for range 2 { // the second leases 10, leaving 9 here
		if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed {
			t.Fatalf("AllowN = %+v, %v", d, err)
		}
	}
	clock.Advance(2 * time.Second) // the lease has ended: a sweep gives it back
	done := make(chan error)
	go func() { done <- s.Reset(ctx, "k", lim) }()
	<-h.entered
	if d, _ := m.AllowN(ctx, "k", lim, 5); !d.Allowed { // another process, after the reset
		t.Fatalf("shared AllowN(5) = %+v", d)
	}
	s.SweepNow()
	close(h.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d, _ := m.AllowN(ctx, "k", lim, 0); d.Remaining != 15 {
		t.Errorf("shared Remaining = %d, want 15: a lease from before the reset was given back (stats %+v)", d.Remaining, s.Stats())
	}
}

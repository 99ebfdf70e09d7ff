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

func (f *faulty) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	if err := f.fault(ctx); err != nil {
		return sluice.PermitDecision{}, err
	}
	return f.Store.Acquire(ctx, key, lim, holder)
}

func (f *faulty) Release(ctx context.Context, key, holder string) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.Store.Release(ctx, key, holder)
}

func (f *faulty) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	if err := f.fault(ctx); err != nil {
		return sluice.PermitDecision{}, err
	}
	return f.Store.Extend(ctx, key, lim, holder)
}

var _ sluice.Semaphore = (*faulty)(nil)

func TestSemaphoreFailClosed(t *testing.T) {
	f := newFaulty(t, memstore.WithSweepInterval(0))
	s := mustNew(t, f, failover.WithProbeInterval(time.Hour))
	ctx := t.Context()
	lim := sluice.ConcurrencyLimit{Max: 5, TTL: time.Minute}
	if d, err := s.Acquire(ctx, "k", lim, "a"); err != nil || !d.Acquired || d.Degraded {
		t.Fatalf("healthy: %+v, %v", d, err)
	}
	f.mode.Store(failing)
	d, err := s.Acquire(ctx, "k", lim, "b")
	if err != nil || d.Acquired || !d.Degraded || d.RetryAfter != time.Hour || d.Limit != lim {
		t.Fatalf("failing, FailClosed: %+v, %v, want a Degraded denial with RetryAfter 1h", d, err)
	}
	if err := s.Release(ctx, "k", "a"); !errors.Is(err, failover.ErrUnavailable) {
		t.Fatalf("Release of a shared permit while failing: %v, want ErrUnavailable", err)
	}
	d, err = s.Extend(ctx, "k", lim, "a")
	if !errors.Is(err, failover.ErrUnavailable) || errors.Is(err, sluice.ErrPermitLost) || !d.Degraded || d.Acquired {
		t.Fatalf("Extend of a shared permit while failing: %+v, %v, want ErrUnavailable, not lost", d, err)
	}
	if st := s.Stats(); st.DegradedDenied != 1 {
		t.Fatalf("stats %+v, want 1 degraded denial", st)
	}
}

// TestSemaphoreFailOpenLocalShare: FailOpen admits max(Max/Replicas, 1)
// per key locally; the local permits are released and extended locally,
// even once the shared store answers again.
func TestSemaphoreFailOpenLocalShare(t *testing.T) {
	f := newFaulty(t, memstore.WithSweepInterval(0))
	s := mustNew(t, f, failover.WithDefaultMode(sluice.FailOpen), failover.WithReplicas(3), failover.WithProbeInterval(time.Hour))
	ctx := t.Context()
	lim := sluice.ConcurrencyLimit{Max: 7, TTL: time.Minute}
	f.mode.Store(failing)
	for _, h := range []string{"a", "b"} {
		if d, err := s.Acquire(ctx, "k", lim, h); err != nil || !d.Acquired || !d.Degraded || d.Limit != lim {
			t.Fatalf("local acquire %s: %+v, %v", h, d, err)
		}
	}
	if d, _ := s.Acquire(ctx, "k", lim, "c"); d.Acquired || !d.Degraded || d.Held != 2 {
		t.Fatalf("third local acquire: %+v, want denied (a share of 7/3 = 2)", d)
	}
	// Renewing a local permit stays local and counts once.
	if d, _ := s.Acquire(ctx, "k", lim, "a"); !d.Acquired || d.Held != 2 {
		t.Fatalf("local renewal: %+v", d)
	}

	f.mode.Store(healthy)
	calls := f.calls.Load()
	if d, err := s.Extend(ctx, "k", lim, "b"); err != nil || !d.Acquired || !d.Degraded {
		t.Fatalf("local extend: %+v, %v", d, err)
	}
	if err := s.Release(ctx, "k", "a"); err != nil {
		t.Fatal(err)
	}
	if n := f.calls.Load(); n != calls {
		t.Fatalf("%d shared calls for local permits, want none", n-calls)
	}
	if n := f.Store.Held("k"); n != 0 {
		t.Fatalf("the shared store holds %d permits, want 0", n)
	}
	f.mode.Store(failing)
	if d, _ := s.Acquire(ctx, "k", lim, "c"); !d.Acquired || d.Held != 2 {
		t.Fatalf("local acquire after a local release: %+v, want acquired, Held 2", d)
	}
}

func TestSemaphoreFailOpenMinOne(t *testing.T) {
	f := newFaulty(t, memstore.WithSweepInterval(0))
	s := mustNew(t, f, failover.WithDefaultMode(sluice.FailOpen), failover.WithReplicas(10), failover.WithProbeInterval(time.Hour))
	f.mode.Store(failing)
	lim := sluice.ConcurrencyLimit{Max: 3, TTL: time.Minute}
	if d, _ := s.Acquire(t.Context(), "k", lim, "a"); !d.Acquired {
		t.Fatalf("%+v, want a share of 1", d)
	}
	if d, _ := s.Acquire(t.Context(), "k", lim, "b"); d.Acquired {
		t.Fatalf("%+v, want a share of 1", d)
	}
}

func TestSemaphoreFailOpenNoReplicas(t *testing.T) {
	f := newFaulty(t, memstore.WithSweepInterval(0))
	s := mustNew(t, f, failover.WithDefaultMode(sluice.FailOpen), failover.WithProbeInterval(time.Minute))
	f.mode.Store(failing)
	d, err := s.Acquire(t.Context(), "k", sluice.ConcurrencyLimit{Max: 3, TTL: time.Minute}, "a")
	if err != nil || d.Acquired || !d.Degraded || d.RetryAfter != time.Minute {
		t.Fatalf("%+v, %v, want a Degraded denial", d, err)
	}
}

// TestSemaphoreTimeoutNotRetried: a shared call that times out is made
// once, never again.
func TestSemaphoreTimeoutNotRetried(t *testing.T) {
	f := newFaulty(t, memstore.WithSweepInterval(0))
	s := mustNew(t, f, failover.WithTimeout(10*time.Millisecond), failover.WithFailureThreshold(100), failover.WithProbeInterval(time.Hour))
	f.mode.Store(hanging)
	lim := sluice.ConcurrencyLimit{Max: 3, TTL: time.Minute}
	before := f.calls.Load()
	d, err := s.Acquire(t.Context(), "k", lim, "a")
	if err != nil || d.Acquired || !d.Degraded {
		t.Fatalf("%+v, %v", d, err)
	}
	if n := f.calls.Load() - before; n != 1 {
		t.Fatalf("%d shared calls, want 1", n)
	}
}

// TestSemaphoreLostIsAnAnswer: ErrPermitLost from the shared store is its
// answer, not a failure.
func TestSemaphoreLostIsAnAnswer(t *testing.T) {
	f := newFaulty(t, memstore.WithSweepInterval(0))
	s := mustNew(t, f, failover.WithFailureThreshold(1))
	d, err := s.Extend(t.Context(), "k", sluice.ConcurrencyLimit{Max: 3, TTL: time.Minute}, "never")
	if !errors.Is(err, sluice.ErrPermitLost) || d.Degraded {
		t.Fatalf("%+v, %v", d, err)
	}
	if st := s.Stats(); st.SharedErrors != 0 || st.Open {
		t.Fatalf("stats %+v: a lost permit counted as a failure", st)
	}
}

func TestSemaphoreUnsupported(t *testing.T) {
	m := memstore.New(memstore.WithSweepInterval(0))
	defer m.Close()
	s := mustNew(t, onlyStore{m})
	if _, err := s.Acquire(t.Context(), "k", sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}, "a"); !errors.Is(err, sluice.ErrSemaphoreUnsupported) {
		t.Fatal(err)
	}
}

func TestSemaphoreInvalidWhileDown(t *testing.T) {
	f := newFaulty(t, memstore.WithSweepInterval(0))
	s := mustNew(t, f, failover.WithDefaultMode(sluice.FailOpen), failover.WithReplicas(2))
	f.mode.Store(failing)
	var le *sluice.LimitError
	if _, err := s.Acquire(t.Context(), "k", sluice.ConcurrencyLimit{Max: 0, TTL: time.Second}, "a"); !errors.As(err, &le) || le.Field != "Max" {
		t.Fatal(err)
	}
	if f.calls.Load() != 0 {
		t.Fatalf("an invalid call reached the shared store")
	}
}

// TestSemaphoreAcquireWaitDegraded: a degraded denial is waited by its
// RetryAfter (the probe interval), not by the shared store's wake.
func TestSemaphoreAcquireWaitDegraded(t *testing.T) {
	f := newFaulty(t, memstore.WithSweepInterval(0))
	s := mustNew(t, f, failover.WithProbeInterval(time.Hour), failover.WithFailureThreshold(100))
	f.mode.Store(failing)
	l := sluice.New(s)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	before := f.calls.Load()
	p, d, err := l.AcquireWait(ctx, "k", sluice.ConcurrencyLimit{Max: 1, TTL: time.Minute})
	if !errors.Is(err, sluice.ErrWouldExceedDeadline) || p != nil || !d.Degraded {
		t.Fatalf("%v %+v %v, want ErrWouldExceedDeadline at once", p, d, err)
	}
	if n := f.calls.Load() - before; n != 1 {
		t.Fatalf("%d shared calls, want 1", n)
	}
}

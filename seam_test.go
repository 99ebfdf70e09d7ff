package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// plain is a Store with AllowN alone.
type plain struct{ s *memstore.Store }

func (p plain) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	return p.s.AllowN(ctx, key, lim, n)
}

// embedded is a store written against the seam: Unsupported, AllowN and
// Reset.
type embedded struct {
	sluice.Unsupported
	plain
	resets int
}

func (e *embedded) Reset(context.Context, string, sluice.Limit) error { e.resets++; return nil }

var _ sluice.FullStore = (*embedded)(nil)

// leaser is a store of the deprecated Leaser shape.
type leaser struct {
	plain
	leased int
}

func (l *leaser) Lease(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	l.leased += n
	return l.s.Reserve(ctx, key, lim, n)
}

func (l *leaser) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	return l.s.Return(ctx, key, lim, n, at)
}

// unsupported checks that every optional method of f reports its
// capability unsupported, but those named in has.
func unsupported(t *testing.T, name string, f sluice.FullStore, has map[string]bool) {
	t.Helper()
	ctx := context.Background()
	lim := sluice.PerSecond(1)
	cl := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	checks := []struct {
		method   string
		err      error
		sentinel error
	}{
		{"AllowMulti", func() error { _, err := f.AllowMulti(ctx, nil); return err }(), sluice.ErrMultiUnsupported},
		{"Reserve", func() error { _, _, err := f.Reserve(ctx, "k", lim, 0); return err }(), sluice.ErrReserveUnsupported},
		{"Return", f.Return(ctx, "k", lim, 0, time.Time{}), sluice.ErrReserveUnsupported},
		{"Reset", f.Reset(ctx, "k", lim), sluice.ErrResetUnsupported},
		{"Acquire", func() error { _, err := f.Acquire(ctx, "k", cl, "h"); return err }(), sluice.ErrSemaphoreUnsupported},
		{"Extend", func() error { _, err := f.Extend(ctx, "k", cl, "h"); return err }(), sluice.ErrSemaphoreUnsupported},
		{"Release", f.Release(ctx, "k", "h"), sluice.ErrSemaphoreUnsupported},
	}
	for _, c := range checks {
		if got := errors.Is(c.err, c.sentinel); got == has[c.method] {
			t.Errorf("%s: %s = %v; want the sentinel %v: %v", name, c.method, c.err, !has[c.method], c.sentinel)
		}
	}
	if ch := f.Freed("k"); (ch != nil) != has["Freed"] {
		t.Errorf("%s: Freed = %v, want a channel %v", name, ch, has["Freed"])
	}
	if err := f.Close(); err != nil {
		t.Errorf("%s: Close = %v", name, err)
	}
}

func TestLift(t *testing.T) {
	m := memstore.New(memstore.WithSweepInterval(0))
	defer m.Close()
	if sluice.Lift(nil) != nil {
		t.Error("Lift(nil) is not nil")
	}
	if f := sluice.Lift(m); f != sluice.FullStore(m) {
		t.Errorf("Lift of a FullStore = %v, want itself", f)
	}
	unsupported(t, "a plain store", sluice.Lift(plain{m}), nil)
	e := &embedded{plain: plain{m}}
	if f := sluice.Lift(e); f != sluice.FullStore(e) {
		t.Errorf("Lift of a store embedding Unsupported = %v, want itself", f)
	}
	unsupported(t, "Unsupported embedded, with Reset", e, map[string]bool{"Reset": true})
	if e.resets != 1 {
		t.Errorf("Reset reached the store %d times, want 1", e.resets)
	}
	// The small interfaces a store implements are found.
	_, so := newSemOnly()
	unsupported(t, "a Store and Semaphore", sluice.Lift(so), map[string]bool{"Acquire": true, "Extend": true, "Release": true})
}

// A store of the deprecated Leaser shape reserves through Lease.
func TestLiftLeaser(t *testing.T) {
	m := memstore.New(memstore.WithSweepInterval(0))
	defer m.Close()
	l := &leaser{plain: plain{m}}
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Hour}
	r, err := sluice.New(l).Reserve(context.Background(), "k", lim, 3)
	if err != nil || !r.Decision().Allowed || l.leased != 3 {
		t.Fatalf("Reserve through a Leaser = %+v, %v (leased %d), want 3 admitted by Lease", r, err, l.leased)
	}
	if err := r.Settle(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if d, _ := m.AllowN(context.Background(), "k", lim, 0); d.Remaining != 4 {
		t.Errorf("after settling 1 of 3: Remaining %d, want 4", d.Remaining)
	}
}

// The Limiter asks a plain store through the seam: what it lacks is the
// capability's error.
func TestLimiterOnPlainStore(t *testing.T) {
	m := memstore.New(memstore.WithSweepInterval(0))
	defer m.Close()
	l := sluice.New(plain{m})
	ctx := context.Background()
	if _, err := l.AllowMulti(ctx, []sluice.Request{{Key: "k", Limit: sluice.PerSecond(1), N: 1}}); !errors.Is(err, sluice.ErrMultiUnsupported) {
		t.Errorf("AllowMulti = %v, want ErrMultiUnsupported", err)
	}
	if _, err := l.Reserve(ctx, "k", sluice.PerSecond(1), 1); !errors.Is(err, sluice.ErrReserveUnsupported) || !errors.Is(err, sluice.ErrLeaseUnsupported) {
		t.Errorf("Reserve = %v, want ErrReserveUnsupported (alias ErrLeaseUnsupported)", err)
	}
	if _, _, err := l.Acquire(ctx, "k", sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}); !errors.Is(err, sluice.ErrSemaphoreUnsupported) {
		t.Errorf("Acquire = %v, want ErrSemaphoreUnsupported", err)
	}
	if l.Store() != (plain{m}) {
		t.Errorf("Store() = %v, want the store given to New", l.Store())
	}
}

// A ConcurrencyLimit written with the deprecated Lease works as one
// written with TTL.
func TestConcurrencyLimitLease(t *testing.T) {
	old := sluice.ConcurrencyLimit{Max: 2, Lease: time.Second}
	if got, want := old.Normalize(), (sluice.ConcurrencyLimit{Max: 2, TTL: time.Second}); got != want {
		t.Errorf("Normalize() = %+v, want %+v", got, want)
	}
	if both := (sluice.ConcurrencyLimit{Max: 2, TTL: time.Minute, Lease: time.Second}).Normalize(); both.TTL != time.Minute || both.Lease != 0 {
		t.Errorf("Normalize() with both = %+v, want TTL's", both)
	}
	if err := old.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	var le *sluice.LimitError
	if err := (sluice.ConcurrencyLimit{Max: 1, Lease: time.Millisecond}).Validate(); !errors.As(err, &le) || le.Field != "TTL" {
		t.Errorf("Validate() of a 1ms Lease = %v, want a *LimitError on TTL", err)
	}
	if sluice.MinLease != sluice.MinTTL || sluice.MaxLease != sluice.MaxTTL {
		t.Error("MinLease and MaxLease are not MinTTL and MaxTTL")
	}
	m := memstore.New(memstore.WithSweepInterval(0))
	defer m.Close()
	p, d, err := sluice.New(m).Acquire(context.Background(), "k", old)
	if err != nil || p == nil || d.Limit.TTL != time.Second {
		t.Fatalf("Acquire with Lease = %v, %+v, %v", p, d, err)
	}
	if d, err := m.Acquire(context.Background(), "k2", old, "h"); err != nil || !d.Acquired {
		t.Errorf("memstore Acquire with Lease = %+v, %v", d, err)
	}
}

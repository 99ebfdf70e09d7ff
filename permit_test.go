package sluice_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// semOnly is a Store and Semaphore that hides memstore's PermitWaker, as a
// store shared across processes has none.
type semOnly struct {
	sluice.Store
	sluice.Semaphore
}

func newSemOnly() (*memstore.Store, semOnly) {
	m := memstore.New(memstore.WithSweepInterval(0))
	return m, semOnly{Store: m, Semaphore: m}
}

var _ sluice.PermitWaker = (*memstore.Store)(nil)

func TestPermitAcquireReleaseExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := memstore.New(memstore.WithSweepInterval(0))
		l := sluice.New(m)
		defer l.Close()
		ctx := t.Context()
		lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
		p, d, err := l.Acquire(ctx, "k", lim)
		if err != nil || p == nil || !d.Acquired || !p.Expires().Equal(time.Now().Add(time.Second)) {
			t.Fatalf("acquire: %v %+v %v", p, d, err)
		}
		if len(p.Holder()) != 32 || p.Key() != "k" || p.Limit() != lim {
			t.Fatalf("permit: %q %q %v", p.Holder(), p.Key(), p.Limit())
		}
		q, d, err := l.Acquire(ctx, "k", lim)
		if err != nil || q != nil || d.Acquired || d.RetryAfter != time.Second || d.Held != 1 {
			t.Fatalf("second: %v %+v %v", q, d, err)
		}
		time.Sleep(800 * time.Millisecond)
		if err := p.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		if want := time.Now().Add(time.Second); !p.Expires().Equal(want) {
			t.Fatalf("expires %v, want %v", p.Expires(), want)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatalf("second release: %v", err)
		}
		if n := m.Held("k"); n != 0 {
			t.Fatalf("held %d after release", n)
		}
		if err := p.Extend(ctx); !errors.Is(err, sluice.ErrPermitLost) {
			t.Fatalf("extend after release: %v", err)
		}
		p, _, _ = l.Acquire(ctx, "k", lim)
		time.Sleep(time.Second)
		if err := p.Extend(ctx); !errors.Is(err, sluice.ErrPermitLost) {
			t.Fatalf("extend after the lease: %v", err)
		}
	})
}

// TestAcquireWaitWokenByRelease: a waiter on memstore is woken by the
// release, not by the lease's end.
func TestAcquireWaitWokenByRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := sluice.New(memstore.New(memstore.WithSweepInterval(0)))
		defer l.Close()
		ctx := t.Context()
		lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Minute}
		p, _, _ := l.Acquire(ctx, "k", lim)
		start := time.Now()
		got := make(chan *sluice.Permit)
		go func() {
			q, _, err := l.AcquireWait(ctx, "k", lim)
			if err != nil {
				t.Error(err)
			}
			got <- q
		}()
		time.Sleep(250 * time.Millisecond)
		synctest.Wait()
		p.Release(ctx)
		q := <-got
		if q == nil || time.Since(start) != 250*time.Millisecond {
			t.Fatalf("permit %v after %v, want one after 250ms", q, time.Since(start))
		}
		q.Release(ctx)
	})
}

// TestAcquireWaitSleepsToExpiry: without a waker, the waiter sleeps until
// the earliest lease ends (no jitter here), exactly.
func TestAcquireWaitSleepsToExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, s := newSemOnly()
		l := sluice.New(s, sluice.WithMaxJitter(0))
		defer l.Close()
		ctx := t.Context()
		lim := sluice.ConcurrencyLimit{Max: 2, TTL: time.Second}
		l.Acquire(ctx, "k", lim)
		time.Sleep(300 * time.Millisecond)
		l.Acquire(ctx, "k", lim)
		start := time.Now()
		p, d, err := l.AcquireWait(ctx, "k", lim)
		if err != nil || p == nil || !d.Acquired || time.Since(start) != 700*time.Millisecond {
			t.Fatalf("%v %+v %v after %v, want a permit after 700ms", p, d, err, time.Since(start))
		}
		if n := m.Held("k"); n != 2 {
			t.Fatalf("held %d", n)
		}
	})
}

func TestAcquireWaitDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, s := newSemOnly()
		l := sluice.New(s)
		defer l.Close()
		lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
		l.Acquire(t.Context(), "k", lim)
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		p, d, err := l.AcquireWait(ctx, "k", lim)
		if !errors.Is(err, sluice.ErrWouldExceedDeadline) || p != nil || d.RetryAfter != time.Second || time.Since(start) != 0 {
			t.Fatalf("%v %+v %v after %v", p, d, err, time.Since(start))
		}

		// With a waker, it waits for a release until the deadline.
		l2 := sluice.New(memstore.New(memstore.WithSweepInterval(0)))
		defer l2.Close()
		l2.Acquire(t.Context(), "k", lim)
		p, d, err = l2.AcquireWait(ctx, "k", lim)
		if !errors.Is(err, context.DeadlineExceeded) || p != nil || d.Acquired || time.Since(start) != 500*time.Millisecond {
			t.Fatalf("%v %+v %v after %v", p, d, err, time.Since(start))
		}
	})
}

// notSem is a Store without Semaphore.
type notSem struct{ sluice.Store }

func TestAcquireUnsupported(t *testing.T) {
	l := sluice.New(notSem{memstore.New(memstore.WithSweepInterval(0))})
	defer l.Close()
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	if _, _, err := l.Acquire(t.Context(), "k", lim); !errors.Is(err, sluice.ErrSemaphoreUnsupported) {
		t.Fatal(err)
	}
	if _, _, err := l.AcquireWait(t.Context(), "k", lim); !errors.Is(err, sluice.ErrSemaphoreUnsupported) {
		t.Fatal(err)
	}
}

func TestAcquireInvalid(t *testing.T) {
	l := sluice.New(memstore.New(memstore.WithSweepInterval(0)))
	defer l.Close()
	var le *sluice.LimitError
	if _, _, err := l.AcquireWait(t.Context(), "k", sluice.ConcurrencyLimit{Max: 0, TTL: time.Second}); !errors.As(err, &le) || le.Field != "Max" {
		t.Fatal(err)
	}
}

package stack_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/stack"
)

// TestSemaphoreThroughTheStack: permits pass through tiered and failover to
// the shared store, and a waiter is woken by a release through the layers.
func TestSemaphoreThroughTheStack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := memstore.New(memstore.WithSweepInterval(0))
		defer m.Close()
		s := mustNew(t, m, stack.WithTiered())
		l := sluice.New(s)
		ctx := t.Context()
		lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Minute}
		p, d, err := l.Acquire(ctx, "k", lim)
		if err != nil || p == nil || d.Degraded || m.Held("k") != 1 {
			t.Fatalf("%v %+v %v, held %d", p, d, err, m.Held("k"))
		}
		start := time.Now()
		go func() {
			time.Sleep(100 * time.Millisecond)
			p.Release(ctx)
		}()
		q, _, err := l.AcquireWait(ctx, "k", lim)
		if err != nil || q == nil || time.Since(start) != 100*time.Millisecond {
			t.Fatalf("%v %v after %v, want a permit after 100ms", q, err, time.Since(start))
		}
		q.Release(ctx)
		if n := m.Held("k"); n != 0 {
			t.Fatalf("held %d", n)
		}
	})
}

type rateOnly struct{ sluice.Store }

func TestSemaphoreUnsupported(t *testing.T) {
	m := memstore.New(memstore.WithSweepInterval(0))
	defer m.Close()
	for _, opts := range [][]stack.Option{nil, {stack.WithTiered()}} {
		s := mustNew(t, rateOnly{m}, opts...)
		if _, err := s.Acquire(t.Context(), "k", sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}, "a"); !errors.Is(err, sluice.ErrSemaphoreUnsupported) {
			t.Fatal(err)
		}
		if s.Freed("k") != nil {
			t.Fatal("Freed of a store without concurrency limits is not nil")
		}
	}
}

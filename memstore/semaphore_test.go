package memstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newSem(t *testing.T, opts ...memstore.Option) (*memstore.Store, *fakeClock) {
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	return newStore(t, append([]memstore.Option{memstore.WithClock(c.Now)}, opts...)...), c
}

func TestSemaphoreMaxAndRelease(t *testing.T) {
	ctx := context.Background()
	s, c := newSem(t)
	lim := sluice.ConcurrencyLimit{Max: 2, TTL: time.Second}
	for i, h := range []string{"a", "b"} {
		d, err := s.Acquire(ctx, "k", lim, h)
		if err != nil || !d.Acquired || d.Held != i+1 || !d.Expires.Equal(c.Now().Add(time.Second)) {
			t.Fatalf("acquire %s: %+v, %v", h, d, err)
		}
	}
	c.Add(300 * time.Millisecond)
	d, err := s.Acquire(ctx, "k", lim, "c")
	if err != nil || d.Acquired || d.Held != 2 || d.RetryAfter != 700*time.Millisecond || !d.Expires.IsZero() {
		t.Fatalf("third: %+v, %v", d, err)
	}
	if err := s.Release(ctx, "k", "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "k", "a"); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if d, _ := s.Acquire(ctx, "k", lim, "c"); !d.Acquired || d.Held != 2 {
		t.Fatalf("after release: %+v", d)
	}
}

func TestSemaphoreExpiresExactly(t *testing.T) {
	ctx := context.Background()
	s, c := newSem(t)
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	if d, _ := s.Acquire(ctx, "k", lim, "a"); !d.Acquired {
		t.Fatal(d)
	}
	c.Add(time.Second - time.Microsecond)
	if d, _ := s.Acquire(ctx, "k", lim, "b"); d.Acquired || d.RetryAfter != time.Microsecond {
		t.Fatalf("1µs before the lease ends: %+v", d)
	}
	c.Add(time.Microsecond)
	if d, _ := s.Acquire(ctx, "k", lim, "b"); !d.Acquired || d.Held != 1 {
		t.Fatalf("at the lease's end: %+v", d)
	}
	if d, err := s.Extend(ctx, "k", lim, "a"); !errors.Is(err, sluice.ErrPermitLost) || d.Acquired {
		t.Fatalf("extend of a lost permit: %+v, %v", d, err)
	}
}

func TestSemaphoreRenewAndExtend(t *testing.T) {
	ctx := context.Background()
	s, c := newSem(t)
	lim := sluice.ConcurrencyLimit{Max: 2, TTL: time.Second}
	s.Acquire(ctx, "k", lim, "a")
	c.Add(500 * time.Millisecond)
	d, _ := s.Acquire(ctx, "k", lim, "a")
	if !d.Acquired || d.Held != 1 || !d.Expires.Equal(c.Now().Add(time.Second)) {
		t.Fatalf("renew: %+v", d)
	}
	c.Add(900 * time.Millisecond)
	d, err := s.Extend(ctx, "k", lim, "a")
	if err != nil || !d.Acquired || d.Held != 1 || !d.Expires.Equal(c.Now().Add(time.Second)) {
		t.Fatalf("extend: %+v, %v", d, err)
	}
	c.Add(999 * time.Millisecond)
	if n := s.Held("k"); n != 1 {
		t.Fatalf("held %d", n)
	}
	c.Add(time.Millisecond)
	if n := s.Held("k"); n != 0 {
		t.Fatalf("held %d after the extended lease", n)
	}
}

func TestSemaphoreValidation(t *testing.T) {
	ctx := context.Background()
	s, _ := newSem(t)
	ok := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	for _, tc := range []struct {
		key, holder string
		lim         sluice.ConcurrencyLimit
		field       string
	}{
		{"k", "h", sluice.ConcurrencyLimit{Max: 0, TTL: time.Second}, "Max"},
		{"k", "h", sluice.ConcurrencyLimit{Max: sluice.MaxPermits + 1, TTL: time.Second}, "Max"},
		{"k", "h", sluice.ConcurrencyLimit{Max: 1, TTL: time.Millisecond}, "TTL"},
		{"k", "", ok, "Holder"},
		{"k", string(make([]byte, sluice.MaxHolderLen+1)), ok, "Holder"},
		{"", "h", ok, "Key"},
	} {
		for name, call := range map[string]func() error{
			"acquire": func() error { _, err := s.Acquire(ctx, tc.key, tc.lim, tc.holder); return err },
			"extend":  func() error { _, err := s.Extend(ctx, tc.key, tc.lim, tc.holder); return err },
		} {
			var le *sluice.LimitError
			if err := call(); !errors.As(err, &le) || le.Field != tc.field {
				t.Errorf("%s %q %q %v: %v, want a LimitError on %s", name, tc.key, tc.holder, tc.lim, err, tc.field)
			}
		}
	}
	if n := s.Held("k"); n != 0 {
		t.Fatalf("invalid calls held %d", n)
	}
}

func TestSemaphoreMaxKeys(t *testing.T) {
	ctx := context.Background()
	s, c := newSem(t, memstore.WithMaxKeys(2))
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	s.Acquire(ctx, "a", lim, "h")
	s.Acquire(ctx, "b", lim, "h")
	if _, err := s.Acquire(ctx, "c", lim, "h"); !errors.Is(err, memstore.ErrSemaphoreFull) {
		t.Fatalf("third key: %v", err)
	}
	s.Release(ctx, "a", "h")
	if d, err := s.Acquire(ctx, "c", lim, "h"); err != nil || !d.Acquired {
		t.Fatalf("after a release: %+v, %v", d, err)
	}
	c.Add(time.Second)
	if d, err := s.Acquire(ctx, "d", lim, "h"); err != nil || !d.Acquired {
		t.Fatalf("after the leases ended: %+v, %v", d, err)
	}
}

func TestSemaphoreFreed(t *testing.T) {
	ctx := context.Background()
	s, _ := newSem(t)
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Minute}
	select {
	case <-s.Freed("k"):
	default:
		t.Fatal("Freed of a key with no permit is not closed")
	}
	s.Acquire(ctx, "k", lim, "a")
	ch := s.Freed("k")
	select {
	case <-ch:
		t.Fatal("closed while held")
	default:
	}
	s.Release(ctx, "k", "a")
	select {
	case <-ch:
	default:
		t.Fatal("not closed by Release")
	}
}

// TestSemaphoreFreedAtExpiry: on the default clock, Freed's channel closes
// when the earliest lease ends, with nobody calling the store.
func TestSemaphoreFreedAtExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithSweepInterval(0))
		defer s.Close()
		lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
		start := time.Now()
		s.Acquire(context.Background(), "k", lim, "a")
		<-s.Freed("k")
		if got := time.Since(start); got != time.Second {
			t.Fatalf("woken after %v, want 1s", got)
		}
		if n := s.Held("k"); n != 0 {
			t.Fatalf("held %d", n)
		}
	})
}

// TestSemaphoreFreedAfterExtend: a permit extended before the wake finds
// none expired, and the wake comes at the extended lease's end.
func TestSemaphoreFreedAfterExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithSweepInterval(0))
		defer s.Close()
		ctx := context.Background()
		lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
		start := time.Now()
		s.Acquire(ctx, "k", lim, "a")
		ch := s.Freed("k")
		time.Sleep(500 * time.Millisecond)
		s.Extend(ctx, "k", lim, "a")
		<-ch
		if got := time.Since(start); got != 1500*time.Millisecond {
			t.Fatalf("woken after %v, want 1.5s", got)
		}
	})
}

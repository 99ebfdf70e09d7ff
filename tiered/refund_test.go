package tiered_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/tiered"
)

// daily is a limit whose cached denials would last the rest of the day:
// only a refund frees it sooner.
var daily = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: 24 * time.Hour}

// TestCachedDenialBounded: another process's refund frees a key before the
// store's RetryAfter (here, the rest of the day); no process hears of it,
// so a denial is cached for at most MaxCachedDenial.
func TestCachedDenialBounded(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	x := newExact(clock.Now)
	s := newTiered(t, x, tiered.WithClock(clock.Now))
	defer s.Close()
	for range 3 {
		if _, err := s.AllowN(ctx, "k", daily, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Another process gives one unit back, on the shared store.
	if err := x.Return(ctx, "k", daily, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(tiered.MaxCachedDenial - time.Millisecond)
	d, err := s.AllowN(ctx, "k", daily, 1)
	if err != nil || d.Allowed || s.Stats().CachedDenials != 1 {
		t.Fatalf("within MaxCachedDenial: %+v, %v (stats %+v); want the cached denial", d, err, s.Stats())
	}
	if d.RetryAfter < 23*time.Hour {
		t.Errorf("cached denial's RetryAfter %v, want the store's (the rest of the day)", d.RetryAfter)
	}
	clock.Advance(time.Millisecond)
	if d, err := s.AllowN(ctx, "k", daily, 1); err != nil || !d.Allowed {
		t.Fatalf("after MaxCachedDenial: %+v, %v; want the refunded unit admitted", d, err)
	}
}

// gated holds the answer of one AllowN until released: a denial decided
// before a refund and answered after it.
type gated struct {
	*exact
	once sync.Once
	hold
}

func (g *gated) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	d, err := g.exact.AllowN(ctx, key, lim, n)
	g.once.Do(g.wait)
	return d, err
}

// TestDenialRacingRefundNotCached: a denial decided while a refund of its
// key was on its way may predate the refund, and is not cached.
func TestDenialRacingRefundNotCached(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	x := newExact(clock.Now)
	for range 2 {
		if _, err := x.AllowN(ctx, "k", daily, 1); err != nil {
			t.Fatal(err)
		}
	}
	g := &gated{exact: x, hold: newHold()}
	s := newTiered(t, g, tiered.WithClock(clock.Now))
	defer s.Close()
	denied := make(chan sluice.Decision)
	go func() {
		d, _ := s.AllowN(ctx, "k", daily, 1) // denied by the full key, answered late
		denied <- d
	}()
	<-g.entered
	if err := s.Return(ctx, "k", daily, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if d := <-denied; d.Allowed {
		t.Fatalf("the request decided before the refund: %+v, want denied", d)
	}
	if d, err := s.AllowN(ctx, "k", daily, 1); err != nil || !d.Allowed {
		t.Fatalf("after the refund: %+v, %v (stats %+v); want the refunded unit admitted, not a denial cached from before it", d, err, s.Stats())
	}
}

// TestInFlightThroughLeases: streams take 1 of 5 and give it back when they
// end, through leases taken ahead. Every stream completes, and once the
// leases have ended every unit is back: none is kept counted by a lease
// that was replaced while it was spent from, nor hidden by a denial cached
// across a refund.
func TestInFlightThroughLeases(t *testing.T) {
	shared := memstore.New()
	defer shared.Close()
	s := newTiered(t, shared, tiered.WithLeases(10, 0.5, 50*time.Millisecond), tiered.WithRefreshAhead(0.25))
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: 24 * time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var inFlight, peak, done atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for n := 0; n < 40 && ctx.Err() == nil; {
				d, err := s.AllowN(ctx, "k", lim, 1)
				if err != nil {
					return
				}
				if !d.Allowed {
					time.Sleep(100 * time.Microsecond)
					continue
				}
				n++
				if v := inFlight.Add(1); v > peak.Load() {
					peak.Store(v)
				}
				inFlight.Add(-1)
				if err := s.Return(ctx, "k", lim, 1, time.Time{}); err != nil {
					t.Error(err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if got := done.Load(); got != 16*40 {
		t.Fatalf("%d of %d streams completed in 20s (stats %+v): units were lost", got, 16*40, s.Stats())
	}
	if p := peak.Load(); p > 5 {
		t.Errorf("%d in flight at once, limit 5", p)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d, err := shared.AllowN(ctx, "k", lim, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shared store has %d of 5 free after every stream ended and the leases did (stats %+v)", d.Remaining, s.Stats())
		}
	}
}

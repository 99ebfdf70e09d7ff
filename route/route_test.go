package route_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/sluicetest"
)

func newPair(t *testing.T, opts ...memstore.Option) (*route.Store, *memstore.Store, *memstore.Store) {
	t.Helper()
	main, sec := memstore.New(opts...), memstore.New(opts...)
	t.Cleanup(func() { main.Close(); sec.Close() })
	s, err := route.New(main, sec, route.PerSecond)
	if err != nil {
		t.Fatal(err)
	}
	return s, main, sec
}

// The conformance suite, every capability: limits of a second or less on
// one store, the others on the other; AllowMulti across both.
func TestConformance(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store { s, _, _ := newPair(t); return s },
		sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
			s, _, _ := newPair(t, memstore.WithClock(c.Now))
			return s
		}))
}

var (
	perSecond = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second}
	perMinute = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Minute}
)

// Each limit is counted in its own store only.
func TestRoutes(t *testing.T) {
	ctx := context.Background()
	s, main, sec := newPair(t)
	for _, lim := range []sluice.Limit{perSecond, perMinute} {
		if _, err := s.AllowN(ctx, "k", lim, 1); err != nil {
			t.Fatal(err)
		}
	}
	remaining := func(st sluice.Store, lim sluice.Limit) int {
		d, _ := st.AllowN(ctx, "k", lim, 0)
		return d.Remaining
	}
	if got := []int{remaining(sec, perSecond), remaining(main, perSecond), remaining(main, perMinute), remaining(sec, perMinute)}; !cmp.Equal(got, []int{1, 2, 2, 3}) {
		t.Errorf("remaining per second and minute in each store = %v, want [1 2 2 3]: each limit counted in its own store", got)
	}
}

// Across both stores: a denial by the per-second store gives back what the
// main store admitted, and a denial by the main store counts nothing in
// either.
func TestAllowMultiAcross(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewClock(sluicetest.Epoch())
	s, main, sec := newPair(t, memstore.WithClock(clock.Now))
	reqs := func(n int) []sluice.Request {
		return []sluice.Request{{Key: "a", Limit: perMinute, N: n}, {Key: "a", Limit: perSecond, N: n}}
	}
	for i := range 2 {
		if ds, err := s.AllowMulti(ctx, reqs(1)); err != nil || !ds[0].Allowed || !ds[1].Allowed {
			t.Fatalf("AllowMulti #%d = %+v, %v; want both admitted", i, ds, err)
		}
	}
	// The per-second limit (2) is used up: denied by Other, Main's unit
	// given back.
	ds, err := s.AllowMulti(ctx, reqs(1))
	if err != nil || ds[0].Allowed || ds[1].Allowed || ds[0].RetryAfter != 0 || ds[1].RetryAfter == 0 || ds[0].Remaining != 1 {
		t.Fatalf("AllowMulti over the per-second limit = %+v, %v; want denied by it alone, the minute's unit back (Remaining 1)", ds, err)
	}
	if d, _ := main.AllowN(ctx, "a", perMinute, 0); d.Remaining != 1 {
		t.Errorf("the minute's limit after the denial: Remaining %d, want 1 (given back)", d.Remaining)
	}
	clock.Advance(time.Second)
	// Main's limit denies (2 of 3 left... asking 2 admits; then 1 of 3).
	if ds, _ := s.AllowMulti(ctx, reqs(1)); !ds[0].Allowed {
		t.Fatalf("AllowMulti in the next second = %+v, want admitted", ds)
	}
	ds, err = s.AllowMulti(ctx, reqs(1)) // the minute's 3 used up now? 2 + 1 = 3 used: denied
	if err != nil || ds[0].Allowed || ds[0].RetryAfter == 0 || ds[1].Allowed {
		t.Fatalf("AllowMulti over the minute's limit = %+v, %v; want denied by it", ds, err)
	}
	if d, _ := sec.AllowN(ctx, "a", perSecond, 0); d.Remaining != 1 {
		t.Errorf("the second's limit after Main denied: Remaining %d, want 1 (only peeked)", d.Remaining)
	}
	// A per-second limit found short by the peek reports a wait.
	ds, _ = s.AllowMulti(ctx, reqs(2))
	if ds[1].Allowed || ds[1].RetryAfter <= 0 || ds[1].RetryAfter > time.Second {
		t.Errorf("a per-second limit short of 2 while Main denies: %+v, want a RetryAfter within the second", ds[1])
	}
}

// Invalid input is refused before either store counts.
func TestAllowMultiInvalid(t *testing.T) {
	s, main, _ := newPair(t)
	_, err := s.AllowMulti(context.Background(), []sluice.Request{{Key: "a", Limit: perMinute, N: 1}, {Key: "", Limit: perSecond, N: 1}})
	if !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("AllowMulti with an empty key: %v, want ErrInvalidKey", err)
	}
	if d, _ := main.AllowN(context.Background(), "a", perMinute, 0); d.Remaining != 3 {
		t.Errorf("Main counted %d before the error", 3-d.Remaining)
	}
}

// Concurrent calls across both stores (a frozen clock: no window ends):
// never more admitted than either limit, and at the end each store counts
// exactly the admitted calls, the refunds included.
func TestAllowMultiConcurrent(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewClock(sluicetest.Epoch())
	s, main, sec := newPair(t, memstore.WithClock(clock.Now))
	minute := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 40, Period: time.Minute}
	second := sluice.Limit{Algorithm: sluice.GCRA, Rate: 25, Period: time.Second}
	reqs := []sluice.Request{{Key: "k", Limit: minute, N: 1}, {Key: "k", Limit: second, N: 1}}
	const workers, calls = 8, 20
	admitted := make(chan int, workers)
	for range workers {
		go func() {
			n := 0
			for range calls {
				ds, err := s.AllowMulti(ctx, reqs)
				if err != nil {
					t.Error(err)
				}
				if err == nil && ds[0].Allowed != ds[1].Allowed {
					t.Errorf("AllowMulti = %+v: not all or nothing", ds)
				}
				if err == nil && ds[0].Allowed {
					n++
				}
			}
			admitted <- n
		}()
	}
	total := 0
	for range workers {
		total += <-admitted
	}
	if total != 25 { // the GCRA's burst of 25 at one instant, under the minute's 40
		t.Errorf("admitted %d, want 25", total)
	}
	if d, _ := main.AllowN(ctx, "k", minute, 0); d.Remaining != 40-total {
		t.Errorf("Main counts %d, want the %d admitted", 40-d.Remaining, total)
	}
	if d, _ := sec.AllowN(ctx, "k", second, 0); d.Remaining != 0 {
		t.Errorf("Other has %d left, want 0", d.Remaining)
	}
}

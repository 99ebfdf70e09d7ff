package stack_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/stack"
	"github.com/sluicehq/sluice/tiered"
)

func mustNew(t testing.TB, shared sluice.Store, opts ...stack.Option) *stack.Store {
	t.Helper()
	s, err := stack.New(shared, opts...)
	if err != nil {
		t.Fatalf("stack.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A healthy shared store behind the stack decides as it would alone (with
// leases, it may deny early: see tiered). The deadline is long: a degraded
// decision on a loaded machine is not what this test is about.
func TestConformance(t *testing.T) {
	for _, tt := range []struct {
		name  string
		local bool
		opts  []tiered.Option
		suite []sluicetest.Option
		route bool // per-second limits on a second store
	}{
		{"Failover", false, nil, nil, false},
		{"DenialCache", true, nil, nil, false},
		{"Leases", true, []tiered.Option{tiered.WithLeases(64, 0.5, 50*time.Millisecond)}, []sluicetest.Option{sluicetest.MayDenyEarly()}, false},
		{"Route", true, nil, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			build := func(t *testing.T, now func() time.Time) sluice.Store {
				mo, fo, to := []memstore.Option{}, []failover.Option{failover.WithTimeout(5 * time.Second)}, tt.opts
				if now != nil {
					mo, fo, to = append(mo, memstore.WithClock(now)), append(fo, failover.WithClock(now)), append(to, tiered.WithClock(now))
				}
				m := memstore.New(mo...)
				t.Cleanup(func() { m.Close() })
				opts := []stack.Option{stack.WithFailover(fo...)}
				if tt.route {
					m2 := memstore.New(mo...)
					t.Cleanup(func() { m2.Close() })
					opts = append(opts, stack.WithRoute(m2, route.PerSecond, fo...))
				}
				if tt.local {
					opts = append(opts, stack.WithTiered(to...))
				}
				return mustNew(t, m, opts...)
			}
			sluicetest.Run(t, func(t *testing.T) sluice.Store { return build(t, nil) },
				append(tt.suite, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store { return build(t, c.Now) }))...)
		})
	}
}

// faulty is a memory store whose calls can fail.
type faulty struct {
	*memstore.Store
	down  atomic.Bool
	calls atomic.Int64
}

var errDown = errors.New("connection refused")

func (f *faulty) fault() error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	return nil
}

// Ping is the breaker's probe, not counted in calls: probes run on the
// wall clock's ticker, so how many fall in a phase of a test depends on
// how fast the machine runs it.
func (f *faulty) Ping(context.Context) error {
	if f.down.Load() {
		return errDown
	}
	return nil
}

func (f *faulty) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if err := f.fault(); err != nil {
		return sluice.Decision{}, err
	}
	return f.Store.AllowN(ctx, key, lim, n)
}

func (f *faulty) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	if err := f.fault(); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	return f.Store.Reserve(ctx, key, lim, n)
}

func (f *faulty) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Store.Return(ctx, key, lim, n, at)
}

// During an outage the units leased before it are spent locally, without
// a shared call and not degraded; then each decision is degraded by the
// failure mode, and never cached. After the outage, Close gives the unspent
// units back through failover.
func TestOutage(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	f := &faulty{Store: memstore.New(memstore.WithClock(clock.Now))}
	defer f.Store.Close()
	s := mustNew(t, f,
		stack.WithFailover(failover.WithFailureThreshold(1), failover.WithProbeInterval(5*time.Millisecond), failover.WithClock(clock.Now)),
		stack.WithTiered(tiered.WithLeases(50, 1, time.Hour), tiered.WithClock(clock.Now)))
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour}
	for range 3 { // the second lease follows the demand: 50 units
		if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed {
			t.Fatalf("healthy AllowN = %+v, %v", d, err)
		}
	}
	leased := s.Tiered().Stats().Leased
	f.down.Store(true)
	calls := f.calls.Load()
	spent := 0
	for {
		d, err := s.AllowN(ctx, "k", lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Degraded {
			if d.Allowed {
				t.Fatalf("a degraded decision admitted: %+v (FailClosed)", d)
			}
			break
		}
		if !d.Allowed {
			t.Fatalf("AllowN during the outage = %+v, want a lease spend or a degraded denial", d)
		}
		spent++
		if spent > 100 {
			t.Fatal("more lease spends than were leased")
		}
	}
	if want := int(leased) - 3; spent != want {
		t.Errorf("spent %d leased units during the outage, want the %d left", spent, want)
	}
	if s.Ready() {
		t.Error("Ready() with the breaker open")
	}
	for i := range 3 {
		if d, _ := s.AllowN(ctx, "k", lim, 1); !d.Degraded || d.Allowed {
			t.Errorf("AllowN #%d with the breaker open = %+v, want a degraded denial", i, d)
		}
	}
	if st := s.Tiered().Stats(); st.CachedDenials != 0 {
		t.Errorf("tiered Stats() = %+v: a degraded denial was cached", st)
	}
	if got := f.calls.Load() - calls; got != 1 { // the failed Lease, which opened the breaker
		t.Errorf("%d shared calls during the outage, want 1", got)
	}
	if st := s.Failover().Stats(); st.Degraded != 4 || !st.Open {
		t.Errorf("failover Stats() = %+v, want 4 degraded decisions, open", st)
	}
	f.down.Store(false)
	for deadline := time.Now().Add(5 * time.Second); !s.Ready(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("breaker still open 5s after the store answers")
		}
	}
	if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed || d.Degraded {
		t.Errorf("AllowN after the outage = %+v, %v; want admitted", d, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.AllowN(ctx, "k", lim, 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("AllowN after Close: %v, want ErrClosed", err)
	}
	// Every admitted unit is counted once, every unspent one returned.
	admitted := 3 + spent + 1
	if d, _ := f.Store.AllowN(ctx, "k", lim, 0); d.Remaining != lim.Rate-admitted {
		t.Errorf("shared store after Close: Remaining %d, want %d (%d admitted)", d.Remaining, lim.Rate-admitted, admitted)
	}
}

func TestAccessors(t *testing.T) {
	m := memstore.New()
	defer m.Close()
	s := mustNew(t, m)
	if s.Tiered() != nil || s.Failover() == nil || !s.Ready() || s.String() != s.Failover().String() {
		t.Errorf("without WithTiered: Tiered %v, Failover %v, Ready %v, String %q", s.Tiered(), s.Failover(), s.Ready(), s.String())
	}
	ts := mustNew(t, m, stack.WithTiered())
	if ts.Tiered() == nil || ts.String() != ts.Tiered().String() {
		t.Errorf("with WithTiered: Tiered %v, String %q", ts.Tiered(), ts.String())
	}
	if _, err := stack.New(m, stack.WithFailover(failover.WithTimeout(0))); err == nil {
		t.Error("an invalid failover option: no error")
	}
	if _, err := stack.New(m, stack.WithTiered(tiered.WithMaxKeys(0))); err == nil {
		t.Error("an invalid tiered option: no error")
	}
}

// Under sluice.FailError the stack answers no decision while the shared
// store is down, through the local tier too: an error wrapping
// sluice.ErrNoDecision, nothing cached, and the first call after the
// outage decided by the shared store.
func TestOutageFailError(t *testing.T) {
	f := &faulty{Store: memstore.New()}
	defer f.Store.Close()
	s := mustNew(t, f,
		stack.WithFailover(failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour), failover.WithDefaultMode(sluice.FailError)),
		stack.WithTiered())
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Hour}
	f.down.Store(true)
	for i := range 3 {
		d, err := s.AllowN(ctx, "k", lim, 1)
		if !errors.Is(err, sluice.ErrNoDecision) || d.Allowed {
			t.Fatalf("AllowN #%d with the store down = %+v, %v; want no decision", i, d, err)
		}
	}
	if st := s.Tiered().Stats(); st.CachedDenials != 0 {
		t.Errorf("tiered Stats() = %+v: something was cached", st)
	}
	if st := s.Failover().Stats(); st.Undecided != 3 || st.Degraded != 0 {
		t.Errorf("failover Stats() = %+v, want 3 undecided", st)
	}
	if d, err := f.Store.AllowN(ctx, "k", lim, 0); err != nil || d.Remaining != 2 {
		t.Errorf("the shared key = %+v, %v; want untouched", d, err)
	}
}

// With WithRoute each store has its own failover: the per-second store
// down degrades its limits only, and Ready reports it.
func TestRouteOutage(t *testing.T) {
	mainStore := &faulty{Store: memstore.New()}
	sec := &faulty{Store: memstore.New()}
	defer mainStore.Store.Close()
	defer sec.Store.Close()
	fo := []failover.Option{failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour)}
	s := mustNew(t, mainStore, stack.WithFailover(fo...), stack.WithRoute(sec, route.PerSecond, fo...), stack.WithTiered())
	ctx := context.Background()
	perSecond := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Second}
	perHour := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Hour}
	sec.down.Store(true)
	if d, err := s.AllowN(ctx, "k", perSecond, 1); err != nil || !d.Degraded || d.Allowed {
		t.Errorf("per-second limit with its store down = %+v, %v; want a degraded denial", d, err)
	}
	if d, err := s.AllowN(ctx, "k", perHour, 1); err != nil || d.Degraded || !d.Allowed {
		t.Errorf("per-hour limit with its store up = %+v, %v; want admitted by it", d, err)
	}
	if s.Ready() || !s.Failover().Ready() || s.RouteFailover().Ready() {
		t.Errorf("Ready %v, main %v, per-second %v; want false, true, false", s.Ready(), s.Failover().Ready(), s.RouteFailover().Ready())
	}
	if d, _ := mainStore.Store.AllowN(ctx, "k", perHour, 0); d.Remaining != 4 {
		t.Errorf("main store: Remaining %d, want 4", d.Remaining)
	}
}

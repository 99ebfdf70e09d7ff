package redisstore

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

var long = flag.Bool("redisstore.long", false, "run the long randomized differential test (thousands of sequences)")

// model is internal/algo's state of one key, the reference the Lua scripts
// must match decision for decision.
type model struct {
	w algo.Window
	c algo.Counter
	b algo.Bucket
	g algo.TAT
	l algo.Log
}

func (m *model) step(now int64, p algo.Params, n int64) algo.Result {
	var r algo.Result
	if p.Charge {
		switch p.Kind {
		case algo.FixedWindow:
			m.w, r = algo.FixedWindowCharge(m.w, now, p, n)
		case algo.SlidingWindow:
			m.c, r = algo.SlidingWindowCharge(m.c, now, p, n)
		case algo.TokenBucket:
			m.b, r = algo.TokenBucketCharge(m.b, now, p, n)
		case algo.GCRA:
			m.g, r = algo.GCRACharge(m.g, now, p, n)
		}
		return r
	}
	switch p.Kind {
	case algo.FixedWindow:
		m.w, r = algo.FixedWindowStep(m.w, now, p, n)
	case algo.SlidingWindow:
		m.c, r = algo.SlidingWindowStep(m.c, now, p, n)
	case algo.TokenBucket:
		m.b, r = algo.TokenBucketStep(m.b, now, p, n)
	case algo.GCRA:
		m.g, r = algo.GCRAStep(m.g, now, p, n)
	case algo.SlidingLog:
		r = algo.SlidingLogStep(&m.l, now, p, n, true)
	}
	return r
}

// ret returns n units taken at at, at now: internal/algo's Return.
func (m *model) ret(at, now int64, p algo.Params, n int64) {
	switch p.Kind {
	case algo.FixedWindow:
		m.w = algo.FixedWindowReturn(m.w, at, p, n)
	case algo.SlidingWindow:
		m.c = algo.SlidingWindowReturn(m.c, at, p, n)
	case algo.TokenBucket:
		m.b = algo.TokenBucketReturn(m.b, at, now, p, n)
	case algo.GCRA:
		m.g = algo.GCRAReturn(m.g, at, now, p, n)
	case algo.SlidingLog:
		algo.SlidingLogReturn(&m.l, at, now, p, n)
	}
}

// retNow returns n units at now, as a refund whose admission time is
// unknown (a zero time): the windows use the time a decision would, never
// before the state's window.
func (m *model) retNow(now int64, p algo.Params, n int64) {
	switch p.Kind {
	case algo.FixedWindow:
		m.ret(max(now, m.w.Start), now, p, n)
	case algo.SlidingWindow:
		m.ret(max(now, m.c.Start), now, p, n)
	case algo.SlidingLog:
		algo.SlidingLogReturnNewest(&m.l, now, p, n)
	default:
		m.ret(now, now, p, n)
	}
}

// fuzzParams are lim's parameters as a store runs them.
func fuzzParams(lim sluice.Limit) algo.Params {
	p := algo.NewParams(algo.Kind(lim.Algorithm), int64(lim.Rate), int64(lim.Burst), lim.Period.Microseconds())
	p.Charge = lim.Counting == sluice.CountAll
	return p
}

// randLimit returns a valid random limit: small and large rates, periods
// that do and do not divide the epoch evenly, bursts above and below Rate.
func randLimit(rng *rand.Rand) sluice.Limit {
	for {
		lim := sluice.Limit{Algorithm: sluice.Algorithm(1 + rng.IntN(5))}
		switch rng.IntN(4) {
		case 0:
			lim.Rate = 1 + rng.IntN(5)
		case 1:
			lim.Rate = 1 + rng.IntN(50)
		case 2:
			lim.Rate = []int{7, 13, 97, 1000, 999983, 3}[rng.IntN(6)]
		default:
			lim.Rate = 1 + rng.IntN(300)
		}
		periods := []time.Duration{time.Millisecond, 1500 * time.Microsecond, 7 * time.Millisecond,
			time.Second, time.Minute, time.Hour, 24 * time.Hour,
			time.Duration(1000+rng.IntN(10_000_000)) * time.Microsecond}
		lim.Period = periods[rng.IntN(len(periods))]
		if (lim.Algorithm == sluice.TokenBucket || lim.Algorithm == sluice.GCRA) && rng.IntN(2) == 0 {
			lim.Burst = 1 + rng.IntN(2*lim.Rate)
		}
		if lim.Algorithm != sluice.SlidingLog && rng.IntN(3) == 0 {
			lim.Counting = sluice.CountAll
		}
		if lim.Validate() == nil {
			return lim
		}
	}
}

// sequences numbers the runs of sequence, so that each has a key of its
// own: the fuzzer runs a seed many times on one server, and a key that kept
// an earlier run's state would differ from the fresh model for no fault of
// the scripts.
var sequences atomic.Int64

// sequence runs one random sequence of (time step, n) for one limit through
// the store and internal/algo and reports the first difference.
func sequence(t testing.TB, st fuzzStores, clock *atomic.Int64, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	lim := randLimit(rng)
	p := fuzzParams(lim)
	per := p.Period
	now := int64(1_700_000_000_000_000) + rng.Int64N(100_000_000_000_000)
	if rng.IntN(3) == 0 {
		now -= now % per // on a window boundary
	}
	key := fmt.Sprintf("fuzz/%d/%d", seed, sequences.Add(1))
	var m model
	type lease struct {
		at time.Time
		n  int64
	}
	var leases []lease
	steps := 20 + rng.IntN(60)
	for i := range steps {
		switch rng.IntN(10) {
		case 0: // same instant
		case 1:
			now += per // exactly a period
		case 2:
			now -= rng.Int64N(per/2 + 1) // backwards
		case 3:
			now += rng.Int64N(3 * per)
		case 4:
			now += 1 + rng.Int64N(3)
		default:
			now += rng.Int64N(per/int64(lim.Rate) + 2)
		}
		if rng.IntN(15) == 0 {
			// Same key, algorithm and period, another Rate or Burst: the
			// state is kept and read under the new limit.
			for {
				l2 := randLimit(rng)
				l2.Algorithm, l2.Period, l2.Counting = lim.Algorithm, lim.Period, lim.Counting
				if l2.Algorithm != sluice.TokenBucket && l2.Algorithm != sluice.GCRA {
					l2.Burst = 0
				}
				if l2.Validate() == nil {
					lim = l2
					break
				}
			}
			p = fuzzParams(lim)
		}
		n := int64(1)
		switch rng.IntN(5) {
		case 0:
			n = 0
		case 1:
			n = 1 + rng.Int64N(p.Cap)
		case 2:
			if p.Charge { // beyond the capacity, up to the largest charge
				n = []int64{1 + rng.Int64N(3*p.Cap), p.Cap + 1, sluice.MaxCharge}[rng.IntN(3)]
			}
		}
		clock.Store(now)
		r := m.step(now, p, n)
		want := sluice.Decision{Allowed: r.Allowed, Limit: lim, Remaining: int(r.Remaining),
			RetryAfter: time.Duration(r.RetryAfter) * time.Microsecond, ResetAfter: time.Duration(r.ResetAfter) * time.Microsecond}
		// The same sequence on three keys: the flat script of the
		// algorithm, the batch script and the AllowMulti script (both
		// built from the lib_*.lua functions). Now and then the flat key's
		// step goes through the AllowMulti script instead, so that each
		// script reads state that the other wrote.
		viaMulti := rng.IntN(4) == 0
		var at time.Time // the time the flat key's decision used (a Lease tells it)
		for _, s := range []*Store{st.flat, st.batched} {
			var d sluice.Decision
			var err error
			switch {
			case s == st.flat && viaMulti:
				var ds []sluice.Decision
				if ds, err = s.AllowMulti(context.Background(), []sluice.Request{{Key: key, Limit: lim, N: int(n)}}); err == nil {
					d = ds[0]
				}
			case s == st.flat:
				d, at, err = s.Reserve(context.Background(), key, lim, int(n))
			default:
				d, err = s.AllowN(context.Background(), key, lim, int(n))
			}
			if err != nil {
				t.Fatalf("seed %d step %d: AllowN(%v, %d) at %d (%v): %v", seed, i, lim, n, now, s, err)
			}
			if d != want {
				t.Fatalf("seed %d step %d: AllowN(%v, %d) at %d (%v) = %+v, internal/algo says %+v", seed, i, lim, n, now, s, d, want)
			}
		}
		ds, err := st.flat.AllowMulti(context.Background(), []sluice.Request{{Key: key + "/multi", Limit: lim, N: int(n)}})
		if err != nil {
			t.Fatalf("seed %d step %d: AllowMulti(%v, %d) at %d: %v", seed, i, lim, n, now, err)
		}
		if ds[0] != want {
			t.Fatalf("seed %d step %d: AllowMulti(%v, %d) at %d = %+v, internal/algo says %+v", seed, i, lim, n, now, ds[0], want)
		}
		if rng.IntN(6) == 0 {
			// A refund whose admission time is unknown (a zero time), of
			// up to twice the capacity, to all three keys and the model.
			k := 1 + rng.Int64N(2*p.Cap)
			m.retNow(now, p, k)
			for _, sk := range []struct {
				s *Store
				k string
			}{{st.flat, key}, {st.batched, key}, {st.flat, key + "/multi"}} {
				if err := sk.s.Return(context.Background(), sk.k, lim, int(k), time.Time{}); err != nil {
					t.Fatalf("seed %d step %d: Return(%v, %d) now: %v", seed, i, lim, k, err)
				}
			}
		}
		if !viaMulti && r.Allowed && n > 0 {
			leases = append(leases, lease{at, n})
		}
		if len(leases) > 0 && rng.IntN(4) == 0 {
			// Return part of a lease (the last one, or an earlier one),
			// to all three keys and to the model.
			l := leases[len(leases)-1]
			if rng.IntN(3) == 0 {
				l = leases[rng.IntN(len(leases))]
			}
			at := l.at
			k := 1 + rng.Int64N(l.n)
			m.ret(at.UnixMicro(), now, p, k)
			for _, sk := range []struct {
				s *Store
				k string
			}{{st.flat, key}, {st.batched, key}, {st.flat, key + "/multi"}} {
				if err := sk.s.Return(context.Background(), sk.k, lim, int(k), at); err != nil {
					t.Fatalf("seed %d step %d: Return(%v, %d) at %v: %v", seed, i, lim, k, at, err)
				}
			}
		}
	}
}

type fuzzStores struct{ flat, batched *Store }

func newFuzzStore(t testing.TB) (fuzzStores, *atomic.Int64) {
	srv := redistest.Server(t)
	clock := new(atomic.Int64)
	c := newRueidis(t, srv.Addr)
	tc := WithTestClock(func() time.Time { return time.UnixMicro(clock.Load()) })
	st := fuzzStores{
		flat:    NewRueidis(c, tc, WithBatching(false), WithPrefix("flat:")),
		batched: NewRueidis(c, tc, WithPrefix("batched:")),
	}
	st.batched.batch.alwaysScript = true // one call at a time, through batch.lua
	return st, clock
}

// FuzzScripts drives every Lua script (the flat one of AllowN and the
// AllowMulti one) and internal/algo with the same
// random sequence of (time step, n, limit); the decisions must be equal.
// Its seed corpus runs in go test.
func FuzzScripts(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233} {
		f.Add(seed)
	}
	s, clock := newFuzzStore(f)
	f.Fuzz(func(t *testing.T, seed uint64) {
		sequence(t, s, clock, seed)
	})
}

// TestDifferential runs many random sequences (thousands with
// -redisstore.long).
func TestDifferential(t *testing.T) {
	s, clock := newFuzzStore(t)
	n := 300
	if *long {
		n = 20000
	}
	base := rand.Uint64()
	t.Logf("seeds %d..%d", base, base+uint64(n)-1)
	for i := range uint64(n) {
		sequence(t, s, clock, base+i)
	}
}

// TestLogReturnDepth holds the scripts to internal/algo where a return
// reaches back beyond LogReturnDepth entries: admissions at 100 distinct
// times, then returns of each of them, newest to oldest, and refunds, each
// followed by a peek and a denial that searches the log.
func TestLogReturnDepth(t *testing.T) {
	st, clock := newFuzzStore(t)
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1000, Period: time.Hour}
	p := fuzzParams(lim)
	var m model
	now := int64(1_700_000_000_000_000)
	keys := []struct {
		s *Store
		k string
	}{{st.flat, "depth"}, {st.batched, "depth"}}
	check := func(what string, n int64) {
		t.Helper()
		clock.Store(now)
		r := m.step(now, p, n)
		want := sluice.Decision{Allowed: r.Allowed, Limit: lim, Remaining: int(r.Remaining),
			RetryAfter: time.Duration(r.RetryAfter) * time.Microsecond, ResetAfter: time.Duration(r.ResetAfter) * time.Microsecond}
		for _, sk := range keys {
			if d, err := sk.s.AllowN(ctx, sk.k, lim, int(n)); err != nil || d != want {
				t.Fatalf("%s: AllowN(%d) (%v) = %+v, %v; internal/algo says %+v", what, n, sk.s, d, err, want)
			}
		}
	}
	var ats []int64
	for i := range 100 {
		now += 1000
		check(fmt.Sprint("admission ", i), int64(1+i%3))
		ats = append(ats, now)
	}
	for i := len(ats) - 1; i >= 0; i -= 7 {
		now += 10
		clock.Store(now)
		m.ret(ats[i], now, p, 2)
		for _, sk := range keys {
			if err := sk.s.Return(ctx, sk.k, lim, 2, time.UnixMicro(ats[i])); err != nil {
				t.Fatal(err)
			}
		}
		check(fmt.Sprint("peek after the return of admission ", i), 0)
		check(fmt.Sprint("denial after the return of admission ", i), 900)
	}
	for range 3 {
		now += 10
		clock.Store(now)
		m.retNow(now, p, 40)
		for _, sk := range keys {
			if err := sk.s.Return(ctx, sk.k, lim, 40, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		check("peek after a refund", 0)
		check("denial after a refund", 990)
	}
}

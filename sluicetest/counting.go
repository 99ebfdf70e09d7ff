package sluicetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// countAllTables are the step tables of limits that count every hit
// (sluice.CountAll): a charge over what is left and over the capacity is
// recorded and denied, a cost of 0 is denied while the key is in debt, and
// a denial waits until a cost of 1 (for a cost of 0: of 0) is admitted.
var countAllTables = []stepTable{
	{
		name: "CountAllFixedWindow",
		algs: []sluice.Algorithm{sluice.FixedWindow},
		lim:  sluice.Limit{Rate: 3, Period: time.Second, Counting: sluice.CountAll},
		steps: []step{
			{at: 100 * ms, n: 2, want: ok(1, 900*ms)},
			{at: 200 * ms, n: 5, want: no(0, 800*ms, 800*ms)}, // 7 counted: over the capacity too
			{at: 300 * ms, n: 0, want: no(0, 700*ms, 700*ms)}, // in debt
			{at: 400 * ms, n: 1, want: no(0, 600*ms, 600*ms)}, // 8
			{at: 1100 * ms, n: 0, want: ok(3, 0)},
			{at: 1200 * ms, n: 3, want: ok(0, 800*ms)},
			{at: 1300 * ms, n: 0, want: ok(0, 700*ms)}, // spent, not in debt
			{at: 1999*ms + 999*µs, n: 0, want: ok(0, µs), exact: true},
		},
	},
	{
		name: "CountAllSlidingWindow",
		algs: []sluice.Algorithm{sluice.SlidingWindow},
		lim:  sluice.Limit{Rate: 4, Period: time.Second, Counting: sluice.CountAll},
		steps: []step{
			// 5 counted: in the next window floor(5 × (1 - e)) + 1 <= 4
			// from e = 0.200001s.
			{at: 100 * ms, n: 5, want: no(0, 1100*ms+µs, 1900*ms)},
			// A cost of 0: floor(5 × (1 - e)) <= 4 from e = 1µs.
			{at: 200 * ms, n: 0, want: no(0, 800*ms+µs, 1800*ms)},
			{at: 1 * time.Second, n: 0, want: no(0, µs, time.Second), exact: true},
			{at: 1300 * ms, n: 1, want: ok(0, 1700*ms)},            // 3 weighed + 1
			{at: 1500 * ms, n: 0, want: ok(1, 1500*ms)},            // 2 weighed + 1
			{at: 1500 * ms, n: 3, want: no(0, 500*ms+µs, 1500*ms)}, // 2 + 4 counted
			{at: 2100 * ms, n: 0, want: ok(1, 900*ms)},             // floor(4 × 0.9)
		},
	},
	{
		name: "CountAllBucket",
		algs: []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA},
		lim:  sluice.Limit{Rate: 2, Period: time.Second, Burst: 4, Counting: sluice.CountAll},
		steps: []step{
			{at: 0, n: 3, want: ok(1, 1500*ms)},
			// 5 more: the TAT 4s away, 2s beyond the burst; a cost of 1
			// waits until it is 1.5s beyond.
			{at: 100 * ms, n: 5, want: no(0, 2400*ms, 3900*ms)},
			{at: 200 * ms, n: 0, want: no(0, 1800*ms, 3800*ms)},
			{at: 2 * time.Second, n: 0, want: ok(0, 2*time.Second), exact: true},
			{at: 2100 * ms, n: 0, want: ok(0, 1900*ms)},
			{at: 2600 * ms, n: 1, want: ok(0, 1900*ms)},
			{at: 2600 * ms, n: 10, want: no(0, 5400*ms, 6900*ms)}, // over the capacity: charged
		},
	},
}

func init() { stepTables = append(stepTables, countAllTables...) }

// countAllLimit is longLimit(a) counting every hit.
func countAllLimit(a sluice.Algorithm) sluice.Limit {
	return longLimit(a).WithCounting(sluice.CountAll)
}

// countingAlgorithms are the algorithms that can count every hit.
var countingAlgorithms = []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA}

// testCountAll: on a limit that counts every hit, the largest charge is
// recorded, a cost of 0 then denies, larger ones are errors, and the same
// state read without counting denials sees the debt.
func (s *suite) testCountAll(t *testing.T) {
	for _, a := range s.cfg.only(countingAlgorithms) {
		t.Run(a.String(), func(t *testing.T) {
			e := s.env(t, 0)
			lim, key := countAllLimit(a), newKey(t)
			c := lim.Capacity()
			if d := e.allow(key, lim, c+1); d.Allowed || d.Remaining != 0 {
				t.Fatalf("AllowN(%d) over the capacity on an untouched key = %+v, want denied", c+1, d)
			}
			if d := e.allow(key, lim, 0); d.Allowed {
				t.Fatalf("AllowN(0) after a charge over the capacity = %+v, want denied", d)
			}
			if d := e.allow(key, lim.WithCounting(sluice.CountAdmitted), 1); d.Allowed {
				t.Fatalf("AllowN(1) counting admitted hits, on a key in debt = %+v, want denied", d)
			}
			if d := e.allow(key, lim, sluice.MaxCharge); d.Allowed || d.RetryAfter <= 0 || d.ResetAfter <= 0 {
				t.Fatalf("AllowN(MaxCharge) = %+v, want denied with finite waits", d)
			}
			_, err := e.s.AllowN(context.Background(), key, lim, sluice.MaxCharge+1)
			if !errors.Is(err, sluice.ErrExceedsCapacity) || !namesField(err, "N") {
				t.Fatalf("AllowN(MaxCharge+1) = %v, want ErrExceedsCapacity on N", err)
			}
			other := newKey(t)
			if d := e.allow(other, lim, 0); !d.Allowed || d.Remaining != c {
				t.Fatalf("AllowN(0) on an untouched key = %+v, want allowed, Remaining %d", d, c)
			}
		})
	}
	t.Run("SlidingLogRejected", func(t *testing.T) {
		e := s.env(t, 0)
		_, err := e.s.AllowN(context.Background(), newKey(t), countAllLimit(sluice.SlidingLog), 1)
		if !errors.Is(err, sluice.ErrInvalidLimit) || !namesField(err, "Counting") {
			t.Fatalf("AllowN of a sliding log counting every hit = %v, want ErrInvalidLimit on Counting", err)
		}
	})
}

// testCountAllMulti: inside AllowMulti, a limit that counts every hit is
// charged whatever the call decides, and its denial denies the call.
func (s *suite) testCountAllMulti(t *testing.T) {
	s.need(t, capMulti)
	s.needAll(t)
	e := s.env(t, 0)
	key := newKey(t)
	tokens := countAllLimit(sluice.FixedWindow) // 3 per hour
	reqs := longLimit(sluice.GCRA)              // burst 5
	call := func(n, m int) []sluice.Decision {
		t.Helper()
		return e.multi(sluice.Request{Key: key, Limit: tokens, N: n}, sluice.Request{Key: key, Limit: reqs, N: m})
	}
	if ds := call(2, 5); !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("AllowMulti within both = %+v, want allowed", ds)
	}
	// The request limit denies: the tokens are charged all the same.
	if ds := call(1, 1); ds[0].Allowed || ds[1].Allowed || ds[0].Remaining != 0 {
		t.Fatalf("AllowMulti denied by the request limit = %+v, want denied, the tokens charged", ds)
	}
	if d := e.allow(key, tokens, 0); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("tokens after the denied call = %+v, want 3 of 3 counted", d)
	}
	// The tokens deny: the call is denied, and they are charged.
	if ds := call(4, 0); ds[0].Allowed || ds[1].Allowed {
		t.Fatalf("AllowMulti denied by the tokens = %+v, want denied", ds)
	}
	if d := e.allow(key, tokens, 0); d.Allowed {
		t.Fatalf("tokens after a charge of 4 more = %+v, want in debt", d)
	}
}

// testRefundNow: Return with a zero time gives back units as if taken at
// the store's now: never to an untouched key, reducing a debt.
func (s *suite) testRefundNow(t *testing.T) {
	s.need(t, capReserve)
	ctx := context.Background()
	s.eachLongLimit(t, func(t *testing.T, e *env, lim sluice.Limit, key string) {
		ls := e.f
		c := lim.Capacity()
		ret := func(l sluice.Limit, n int) {
			t.Helper()
			if err := ls.Return(ctx, key, l, n, time.Time{}); err != nil {
				t.Fatalf("Return(%q, %v, %d, now): %v", key, l, n, err)
			}
		}
		ret(lim, c)
		if d := e.allow(key, lim, c); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("AllowN(%d) after a refund to an untouched key = %+v, want allowed, Remaining 0 (no credit)", c, d)
		}
		if d := e.allow(key, lim, 1); d.Allowed {
			t.Fatalf("AllowN(1) on a full key = %+v, want denied", d)
		}
		ret(lim, 2)
		if d := e.allow(key, lim, 0); d.Remaining != 2 {
			t.Fatalf("peek after a refund of 2 = %+v, want Remaining 2", d)
		}
		ret(lim, sluice.MaxCharge) // more than counted: an untouched key, no more
		if d := e.allow(key, lim, 0); d.Remaining != c {
			t.Fatalf("peek after refunding more than counted = %+v, want Remaining %d", d, c)
		}
		if d := e.allow(key, lim, c); !d.Allowed {
			t.Fatalf("AllowN(%d) after the refunds = %+v, want allowed", c, d)
		}
		if d := e.allow(key, lim, 1); d.Allowed {
			t.Fatalf("AllowN(1) after the refunds and a full admission = %+v, want denied (never beyond untouched)", d)
		}
		if lim.Algorithm == sluice.SlidingLog {
			return
		}
		// A debt is reduced by a refund, unit for unit.
		all, key := lim.WithCounting(sluice.CountAll), key+"/debt"
		e.allow(key, all, 3*c)
		ret(all, c)
		if d := e.allow(key, all, 0); d.Allowed {
			t.Fatalf("AllowN(0) after charging %d and refunding %d = %+v, want still in debt", 3*c, c, d)
		}
		ret(all, c)
		if d := e.allow(key, all, 0); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("AllowN(0) after charging %d and refunding %d = %+v, want allowed, Remaining 0", 3*c, 2*c, d)
		}
		ret(all, c)
		if d := e.allow(key, all, 0); d.Remaining != c {
			t.Fatalf("peek after refunding the whole charge = %+v, want Remaining %d", d, c)
		}
	})
}

// testPeekCountAll: a cost of 0 on a limit that counts every hit counts
// nothing either: it reports what is left, and in debt it denies with the
// same RetryAfter however often it is asked.
func (s *suite) testPeekCountAll(t *testing.T) {
	for _, a := range s.cfg.only(countingAlgorithms) {
		t.Run(a.String(), func(t *testing.T) {
			e := s.env(t, 0)
			lim, key := countAllLimit(a), newKey(t)
			c := lim.Capacity()
			e.allow(key, lim, c-1)
			for range 3 {
				if d := e.allow(key, lim, 0); !d.Allowed || d.Remaining != 1 {
					t.Fatalf("AllowN(0) with 1 left = %+v, want allowed, Remaining 1", d)
				}
			}
			if d := e.allow(key, lim, 1); !d.Allowed {
				t.Fatalf("AllowN(1) after peeks with 1 left = %+v, want allowed", d)
			}
			first := e.allow(key, lim, c) // in debt
			if first.Allowed {
				t.Fatalf("AllowN(%d) on a used key = %+v, want denied", c, first)
			}
			var retry time.Duration
			for i := range 3 {
				d := e.allow(key, lim, 0)
				if d.Allowed {
					t.Fatalf("AllowN(0) in debt = %+v, want denied", d)
				}
				if e.exact() && i > 0 && d.RetryAfter != retry {
					t.Errorf("AllowN(0) in debt, asked again at the same time: RetryAfter %v, then %v: a peek counted", retry, d.RetryAfter)
				}
				retry = d.RetryAfter
			}
		})
	}
}

package sluicetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testMulti runs when the store supports AllowMulti: it is
// all-or-nothing, even under concurrency.
func (s *suite) testMulti(t *testing.T) {
	s.need(t, capMulti)
	s.needAll(t)
	t.Run("AllAdmitted", s.testMultiAllAdmitted)
	t.Run("DeniedCountsNothing", s.testMultiDenied)
	t.Run("SameState", s.testMultiSameState)
	t.Run("Invalid", s.testMultiInvalid)
	t.Run("Concurrent", s.testMultiConcurrent)
}

// The limits of the AllowMulti cases: 3 per hour, so that nothing refills
// while a case runs.
var (
	multiFW = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}
	multiSL = sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 3, Period: time.Hour}
)

// multi calls AllowMulti, which must succeed, and checks that it returns
// one decision per request, each echoing its request's Limit.
func (e *env) multi(reqs ...sluice.Request) []sluice.Decision {
	e.t.Helper()
	ds, err := e.f.AllowMulti(context.Background(), reqs)
	if err != nil {
		e.t.Fatalf("AllowMulti(%+v): %v", reqs, err)
	}
	if len(ds) != len(reqs) {
		e.t.Fatalf("AllowMulti(%d requests) returned %d decisions", len(reqs), len(ds))
	}
	for i, d := range ds {
		if d.Limit != reqs[i].Limit {
			e.t.Errorf("AllowMulti decision %d has Limit %v, want %v", i, d.Limit, reqs[i].Limit)
		}
	}
	return ds
}

func (s *suite) testMultiAllAdmitted(t *testing.T) {
	fw, sl := multiFW, multiSL
	e := s.env(t, 0)
	k1, k2 := newKey(t), newKey(t)
	ds := e.multi(sluice.Request{Key: k1, Limit: fw, N: 1}, sluice.Request{Key: k2, Limit: sl, N: 2})
	want := []sluice.Decision{
		{Allowed: true, Limit: fw, Remaining: 2, ResetAfter: time.Hour},
		{Allowed: true, Limit: sl, Remaining: 1, ResetAfter: time.Hour},
	}
	for i := range want {
		if !ds[i].Allowed || ds[i].Remaining != want[i].Remaining || e.exact() && ds[i] != want[i] {
			t.Errorf("AllowMulti decision %d = %+v, want %+v", i, ds[i], want[i])
		}
	}
	if d := e.allow(k1, fw, 0); d.Remaining != 2 {
		t.Errorf("peek %q = %+v, want Remaining 2", k1, d)
	}
	if d := e.allow(k2, sl, 0); d.Remaining != 1 {
		t.Errorf("peek %q = %+v, want Remaining 1", k2, d)
	}
}

// testMultiDenied: a denied call counts nothing, and the requests that did
// not block report a peek of their state as it is.
func (s *suite) testMultiDenied(t *testing.T) {
	fw, sl := multiFW, multiSL
	e := s.env(t, 0)
	k1, k2 := newKey(t), newKey(t)
	e.allow(k1, fw, 1)
	e.allow(k2, sl, 2)
	ds := e.multi(sluice.Request{Key: k1, Limit: fw, N: 1}, sluice.Request{Key: k2, Limit: sl, N: 2})
	// k1 would admit alone: it reports a peek. k2 blocks: one entry
	// must leave, the one admitted at the start.
	want := []sluice.Decision{
		{Limit: fw, Remaining: 2},
		{Limit: sl, Remaining: 1, RetryAfter: time.Hour, ResetAfter: time.Hour},
	}
	if ds[0].Allowed || ds[0].RetryAfter != 0 || ds[0].Remaining != 2 {
		t.Errorf("AllowMulti decision 0 (not blocking) = %+v, want not allowed, RetryAfter 0, Remaining 2", ds[0])
	}
	if ds[1].Allowed || !near(ds[1].RetryAfter, time.Hour, e.slack()+time.Second) || ds[1].Remaining != 1 {
		t.Errorf("AllowMulti decision 1 (blocking) = %+v, want %+v", ds[1], want[1])
	}
	if e.exact() && ds[1] != want[1] {
		t.Errorf("AllowMulti decision 1 (blocking) = %+v, want %+v", ds[1], want[1])
	}
	if got := sluice.CombineRetry(ds); got != ds[1].RetryAfter {
		t.Errorf("CombineRetry = %v, want %v", got, ds[1].RetryAfter)
	}
	if d := e.allow(k1, fw, 0); d.Remaining != 2 {
		t.Errorf("peek %q after a denied AllowMulti = %+v, want Remaining 2 (nothing counted)", k1, d)
	}
	if d := e.allow(k2, sl, 1); !d.Allowed || d.Remaining != 0 {
		t.Errorf("AllowN(%q, 1) after a denied AllowMulti = %+v, want allowed, Remaining 0", k2, d)
	}
	// The requests that did not block report a peek of their state as
	// it is: neither an earlier request of the call on the same state
	// nor their own cost is in their Remaining or ResetAfter. (k2 is
	// now full.)
	k3, k4 := newKey(t), newKey(t)
	tb := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 3, Period: time.Hour, Burst: 5}
	ds = e.multi(sluice.Request{Key: k3, Limit: fw, N: 1}, sluice.Request{Key: k3, Limit: fw, N: 1},
		sluice.Request{Key: k4, Limit: tb, N: 2}, sluice.Request{Key: k2, Limit: sl, N: 1})
	peeks := []sluice.Decision{{Limit: fw, Remaining: 3}, {Limit: fw, Remaining: 3}, {Limit: tb, Remaining: 5}}
	for i, want := range peeks {
		if ds[i] != want {
			t.Errorf("AllowMulti decision %d (not blocking) = %+v, want the peek %+v", i, ds[i], want)
		}
	}
	if ds[3].Allowed || ds[3].RetryAfter <= 0 {
		t.Errorf("AllowMulti decision 3 (blocking) = %+v, want denied with a wait", ds[3])
	}
}

// testMultiSameState: requests on one state are decided one after the
// other.
func (s *suite) testMultiSameState(t *testing.T) {
	fw, sl := multiFW, multiSL
	e := s.env(t, 0)
	k := newKey(t)
	ds := e.multi(sluice.Request{Key: k, Limit: fw, N: 2}, sluice.Request{Key: k, Limit: fw, N: 1})
	if !ds[0].Allowed || ds[0].Remaining != 1 || !ds[1].Allowed || ds[1].Remaining != 0 {
		t.Errorf("AllowMulti(2, 1 on one state of Rate 3) = %+v, want allowed with Remaining 1 then 0", ds)
	}
	if d := e.allow(k, fw, 1); d.Allowed {
		t.Errorf("AllowN(1) after the state was filled by AllowMulti = %+v, want denied", d)
	}
	// Two costs that fit alone but not together deny both.
	k2 := newKey(t)
	e.allow(k2, sl, 1)
	ds = e.multi(sluice.Request{Key: k2, Limit: sl, N: 1}, sluice.Request{Key: k2, Limit: sl, N: 2})
	if ds[0].Allowed || ds[1].Allowed || ds[1].RetryAfter <= 0 {
		t.Errorf("AllowMulti(1, 2 on one state with 2 remaining) = %+v, want both denied, the second blocking", ds)
	}
	if d := e.allow(k2, sl, 0); d.Remaining != 2 {
		t.Errorf("peek after a denied AllowMulti on one state = %+v, want Remaining 2", d)
	}
	// A denied request is not counted for the later ones on its state:
	// with 1 left, 2 is denied, and 1 after it would be admitted (the
	// call is denied, so it reports a peek).
	k4 := newKey(t)
	e.allow(k4, sl, 2)
	ds = e.multi(sluice.Request{Key: k4, Limit: sl, N: 2}, sluice.Request{Key: k4, Limit: sl, N: 1})
	if ds[0].Allowed || ds[0].RetryAfter <= 0 || ds[1].Allowed || ds[1].RetryAfter != 0 || ds[1].Remaining != 1 {
		t.Errorf("AllowMulti(2, 1 on one state with 1 remaining) = %+v, want the first blocking and the second a peek with Remaining 1", ds)
	}
	// A peek is never denied, even under a smaller limit of a state that
	// the call's earlier requests fill.
	k5 := newKey(t)
	one := sl
	one.Rate = 1
	ds = e.multi(sluice.Request{Key: k5, Limit: sl, N: 1}, sluice.Request{Key: k5, Limit: one, N: 0})
	if !ds[0].Allowed || ds[0].Remaining != 2 || !ds[1].Allowed || ds[1].Remaining != 0 || ds[1].RetryAfter != 0 {
		t.Errorf("AllowMulti(1 of 3 per hour, a peek at 1 per hour, on one state) = %+v, want both allowed, Remaining 2 and 0", ds)
	}
	// Costs on one state whose sum exceeds its capacity can never be
	// admitted: ErrExceedsCapacity, as for one request.
	k3 := newKey(t)
	ds, err := e.f.AllowMulti(context.Background(), []sluice.Request{{Key: k3, Limit: sl, N: 2}, {Key: k3, Limit: sl, N: 2}})
	var le *sluice.LimitError
	if !errors.Is(err, sluice.ErrExceedsCapacity) || !errors.As(err, &le) || le.Field != "N" {
		t.Errorf("AllowMulti(2, 2 on one state of capacity 3) = %+v, %v, want a *sluice.LimitError on N wrapping ErrExceedsCapacity", ds, err)
	}
	// One key with two periods: two states.
	day := sl
	day.Period = 2 * time.Hour
	ds = e.multi(sluice.Request{Key: k3, Limit: sl, N: 3}, sluice.Request{Key: k3, Limit: day, N: 3})
	if !ds[0].Allowed || !ds[1].Allowed {
		t.Errorf("AllowMulti(3 per hour, 3 per 2 hours on one key) = %+v, want both allowed", ds)
	}
}

// testMultiInvalid: an invalid request fails the whole call, which counts
// nothing.
func (s *suite) testMultiInvalid(t *testing.T) {
	fw, sl := multiFW, multiSL
	ctx := context.Background()
	e := s.env(t, 0)
	k := newKey(t)
	ms := e.f
	tests := []struct {
		name  string
		req   sluice.Request
		want  error
		field string
	}{
		{"Key", sluice.Request{Key: "", Limit: fw, N: 1}, sluice.ErrInvalidKey, "Key"},
		{"Limit", sluice.Request{Key: k, Limit: sluice.Limit{Rate: 1, Period: time.Second}, N: 1}, sluice.ErrInvalidLimit, "Algorithm"},
		{"Cost", sluice.Request{Key: k, Limit: fw, N: -1}, sluice.ErrInvalidCost, "N"},
		{"Capacity", sluice.Request{Key: k, Limit: fw, N: 4}, sluice.ErrExceedsCapacity, "N"},
	}
	for _, tt := range tests {
		ds, err := ms.AllowMulti(ctx, []sluice.Request{{Key: k, Limit: sl, N: 1}, tt.req})
		if !errors.Is(err, tt.want) || !namesField(err, tt.field) {
			t.Errorf("%s: AllowMulti with an invalid request = %+v, %v, want %v in a *sluice.LimitError of Field %s", tt.name, ds, err, tt.want, tt.field)
		}
	}
	if d := e.allow(k, sl, 0); d.Remaining != 3 {
		t.Errorf("peek after invalid AllowMulti calls = %+v, want Remaining 3 (nothing counted)", d)
	}
	if ds, err := ms.AllowMulti(ctx, nil); err != nil || len(ds) != 0 {
		t.Errorf("AllowMulti(nil) = %+v, %v, want no decisions and no error", ds, err)
	}
}

// testMultiConcurrent: half the goroutines take A and B together, half
// take B alone. A must be counted exactly as often as the pair was
// admitted.
func (s *suite) testMultiConcurrent(t *testing.T) {
	ctx := context.Background()
	e := s.env(t, 0)
	ms := e.f
	limA := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 40, Period: time.Hour}
	limB := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 60, Period: time.Hour}
	a, b := newKey(t), newKey(t)
	var pairs, singles atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for range 30 {
				if w%2 == 0 {
					ds, err := ms.AllowMulti(ctx, []sluice.Request{{Key: a, Limit: limA, N: 1}, {Key: b, Limit: limB, N: 1}})
					if err != nil {
						t.Errorf("AllowMulti: %v", err)
						return
					}
					if ds[0].Allowed != ds[1].Allowed {
						t.Errorf("AllowMulti = %+v: some admitted, some not", ds)
					}
					if ds[0].Allowed {
						pairs.Add(1)
					}
				} else {
					d, err := e.s.AllowN(ctx, b, limB, 1)
					if err != nil {
						t.Errorf("AllowN: %v", err)
						return
					}
					if d.Allowed {
						singles.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	p, sg := int(pairs.Load()), int(singles.Load())
	if p+sg > limB.Rate || p > limA.Rate {
		t.Fatalf("%d pairs and %d singles admitted, want pairs <= %d and pairs+singles <= %d", p, sg, limA.Rate, limB.Rate)
	}
	if !s.cfg.denyEarly && p+sg != limB.Rate {
		t.Errorf("%d pairs and %d singles admitted from 240 tries, want B filled to %d", p, sg, limB.Rate)
	}
	if d := e.allow(a, limA, 0); d.Remaining != limA.Rate-p {
		t.Errorf("peek A = %+v, want Remaining %d - %d pairs admitted", d, limA.Rate, p)
	}
	if d := e.allow(b, limB, 0); d.Remaining != limB.Rate-p-sg {
		t.Errorf("peek B = %+v, want Remaining %d - %d - %d", d, limB.Rate, p, sg)
	}
}

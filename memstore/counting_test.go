package memstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// countingAlgorithms are the algorithms that can count every hit.
var countingAlgorithms = []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA}

// TestCountAll: a limit that counts every hit records a charge larger than
// what is left, and one larger than its capacity, denies (a cost of 0
// included) while in debt, and admits again when time has repaid it.
func TestCountAll(t *testing.T) {
	for _, a := range countingAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			c := sluicetest.NewClock(sluicetest.Epoch())
			s := newStore(t, memstore.WithClock(c.Now))
			lim := sluice.Limit{Algorithm: a, Rate: 10, Period: time.Second, Counting: sluice.CountAll}
			if d := allow(t, s, "k", lim, 8); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("AllowN(8) = %+v, want allowed, 2 left", d)
			}
			d := allow(t, s, "k", lim, 25) // over what is left and over the capacity
			if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Fatalf("AllowN(25) = %+v, want denied with a wait", d)
			}
			peek := allow(t, s, "k", lim, 0)
			if peek.Allowed || peek.RetryAfter <= 0 || peek.RetryAfter > d.RetryAfter {
				t.Fatalf("AllowN(0) in debt = %+v, want denied within %v", peek, d.RetryAfter)
			}
			// The same key read without counting denials sees the debt too.
			if d := allow(t, s, "k", lim.WithCounting(sluice.CountAdmitted), 1); d.Allowed {
				t.Fatalf("AllowN(1) of CountAdmitted in debt = %+v, want denied", d)
			}
			c.Advance(d.RetryAfter - time.Microsecond)
			// A denial's RetryAfter is when a cost of 1 is admitted again
			// (asked here without counting, so that the denial charges
			// nothing).
			if d := allow(t, s, "k", lim.WithCounting(sluice.CountAdmitted), 1); d.Allowed {
				t.Fatalf("AllowN(1) just before RetryAfter = %+v, want denied", d)
			}
			c.Advance(time.Microsecond)
			if d := allow(t, s, "k", lim, 1); !d.Allowed {
				t.Fatalf("AllowN(1) after RetryAfter = %+v, want allowed", d)
			}
		})
	}
}

// TestCountAllUntouched: a charge larger than the capacity on an untouched
// key is denied, since no wait could admit it, and still counted.
func TestCountAllUntouched(t *testing.T) {
	for _, a := range countingAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			c := sluicetest.NewClock(sluicetest.Epoch())
			s := newStore(t, memstore.WithClock(c.Now))
			lim := sluice.Limit{Algorithm: a, Rate: 10, Period: time.Second, Counting: sluice.CountAll}
			if d := allow(t, s, "k", lim, 11); d.Allowed || d.Remaining != 0 {
				t.Fatalf("AllowN(11) on an untouched key = %+v, want denied", d)
			}
			if s.Len() != 1 {
				t.Fatalf("Len = %d after a charge, want 1", s.Len())
			}
			if d := allow(t, s, "k", lim, 0); d.Allowed {
				t.Fatalf("AllowN(0) after the charge = %+v, want denied", d)
			}
			if _, err := s.AllowN(ctx, "k", lim, sluice.MaxCharge+1); !errors.Is(err, sluice.ErrExceedsCapacity) {
				t.Fatalf("AllowN(MaxCharge+1) = %v, want ErrExceedsCapacity", err)
			}
			if _, err := s.AllowN(ctx, "k", lim.WithCounting(sluice.CountAdmitted), 11); !errors.Is(err, sluice.ErrExceedsCapacity) {
				t.Fatalf("AllowN(11) of CountAdmitted = %v, want ErrExceedsCapacity", err)
			}
		})
	}
}

// TestCountAllDebtBound: the largest charges, again and again, keep a
// key's debt at its bound (docs/bounds.md), and its waits finite.
func TestCountAllDebtBound(t *testing.T) {
	for _, a := range countingAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			c := sluicetest.NewClock(sluicetest.Epoch())
			s := newStore(t, memstore.WithClock(c.Now))
			lim := sluice.Limit{Algorithm: a, Rate: 1, Period: 24 * time.Hour, Counting: sluice.CountAll}
			var first, last sluice.Decision
			for i := range 1000 {
				last = allow(t, s, "k", lim, sluice.MaxCharge)
				if i == 0 {
					first = last
				}
			}
			if last.Allowed || last.RetryAfter <= 0 || last.ResetAfter <= 0 {
				t.Fatalf("after 1000 charges of MaxCharge: %+v, want denied with finite waits", last)
			}
			switch a {
			case sluice.TokenBucket, sluice.GCRA:
				// The TAT stops at 2^52 µs ahead: a charge at the bound is
				// still counted, and changes nothing.
				if want := time.Duration(1<<52) * time.Microsecond; first.ResetAfter != want || last.ResetAfter != want {
					t.Fatalf("ResetAfter = %v then %v, want %v (the bound)", first.ResetAfter, last.ResetAfter, want)
				}
			default:
				if last.ResetAfter > 2*lim.Period {
					t.Fatalf("ResetAfter = %v, want at most two periods", last.ResetAfter)
				}
			}
		})
	}
}

// TestCountAllMulti: in AllowMulti a limit that counts every hit is charged
// whatever the call decides, and its denial denies the call.
func TestCountAllMulti(t *testing.T) {
	c := sluicetest.NewClock(sluicetest.Epoch())
	s := newStore(t, memstore.WithClock(c.Now))
	tokens := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Minute, Counting: sluice.CountAll}
	reqs := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Minute}
	call := func(n int) []sluice.Decision {
		t.Helper()
		ds, err := s.AllowMulti(ctx, []sluice.Request{{Key: "t", Limit: tokens, N: n}, {Key: "r", Limit: reqs, N: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	remaining := func(ds []sluice.Decision) []int { return []int{ds[0].Remaining, ds[1].Remaining} }
	allowed := func(ds []sluice.Decision) []bool { return []bool{ds[0].Allowed, ds[1].Allowed} }
	steps := []struct {
		n       int
		allowed []bool
		left    []int
		why     string
	}{
		{30, []bool{true, true}, []int{70, 1}, "both admit"},
		{80, []bool{false, false}, []int{0, 1}, "the tokens deny: charged, the request not counted"},
		{0, []bool{false, false}, []int{0, 1}, "in debt, a cost of 0 denies"},
	}
	for _, st := range steps {
		ds := call(st.n)
		if diff := cmp.Diff(st.allowed, allowed(ds)); diff != "" {
			t.Fatalf("%s: allowed (-want +got):\n%s", st.why, diff)
		}
		if diff := cmp.Diff(st.left, remaining(ds)); diff != "" {
			t.Fatalf("%s: remaining (-want +got):\n%s", st.why, diff)
		}
	}
	// A denial of the other limit still charges the tokens.
	c.Advance(time.Minute)
	call(1)
	call(1) // the request limit is now spent
	ds := call(40)
	if ds[0].Allowed || ds[1].Allowed || ds[1].RetryAfter == 0 || ds[0].Remaining != 100-42 {
		t.Fatalf("a call denied by the request limit = %+v, want denied, 42 tokens charged", ds)
	}
	// Requests on one state must share their Counting.
	_, err := s.AllowMulti(ctx, []sluice.Request{{Key: "t", Limit: tokens, N: 1}, {Key: "t", Limit: tokens.WithCounting(sluice.CountAdmitted), N: 1}})
	var le *sluice.LimitError
	if !errors.As(err, &le) || le.Field != "Counting" {
		t.Fatalf("mixed Counting on one state: %v, want a *LimitError on Counting", err)
	}
}

// TestReturnNow: a Return with a zero time gives back units as if taken at
// the store's now, never more than the key counts.
func TestReturnNow(t *testing.T) {
	for _, a := range countingAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			c := sluicetest.NewClock(sluicetest.Epoch())
			s := newStore(t, memstore.WithClock(c.Now))
			lim := sluice.Limit{Algorithm: a, Rate: 10, Period: time.Second}
			ret := func(l sluice.Limit, n int) {
				t.Helper()
				if err := s.Return(ctx, "k", l, n, time.Time{}); err != nil {
					t.Fatalf("Return(%d): %v", n, err)
				}
			}
			ret(lim, 5) // an untouched key stays untouched
			if s.Len() != 0 {
				t.Fatalf("Len = %d after a refund on an untouched key, want 0", s.Len())
			}
			allow(t, s, "k", lim, 6)
			ret(lim, 4)
			if d := allow(t, s, "k", lim, 0); d.Remaining != 8 {
				t.Fatalf("after 6 taken and 4 refunded: %+v, want 8 left", d)
			}
			ret(lim, 1000) // more than counted: an untouched key, no more
			if d := allow(t, s, "k", lim, 0); d.Remaining != 10 {
				t.Fatalf("after an over-refund: %+v, want 10 left", d)
			}
			all := lim.WithCounting(sluice.CountAll)
			allow(t, s, "k", all, 30) // 20 in debt
			ret(all, 15)
			if d := allow(t, s, "k", all, 0); d.Allowed {
				t.Fatalf("after 30 charged and 15 refunded: %+v, want still in debt", d)
			}
			ret(all, 10)
			if d := allow(t, s, "k", all, 0); !d.Allowed || d.Remaining != 5 {
				t.Fatalf("after 30 charged and 25 refunded: %+v, want 5 left", d)
			}
			if err := s.Return(ctx, "k", lim, sluice.MaxCharge+1, time.Time{}); !errors.Is(err, sluice.ErrExceedsCapacity) {
				t.Fatalf("Return(MaxCharge+1) = %v, want ErrExceedsCapacity", err)
			}
		})
	}
}

package algo

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// chargeParams are p's parameters for a limit that counts every hit.
func chargeParams(k Kind, rate, burst, period int64) Params {
	p := NewParams(k, rate, burst, period)
	p.Charge = true
	return p
}

// charge applies one Charge step of m's algorithm, keeping its state.
func (m *machine) charge(now, n int64) Result {
	var r Result
	switch m.p.Kind {
	case FixedWindow:
		m.w, r = FixedWindowCharge(m.w, now, m.p, n)
	case SlidingWindow:
		m.c, r = SlidingWindowCharge(m.c, now, m.p, n)
	case TokenBucket:
		m.b, r = TokenBucketCharge(m.b, now, m.p, n)
	case GCRA:
		m.t, r = GCRACharge(m.t, now, m.p, n)
	}
	return r
}

// runCharges applies steps in order to a fresh state of p through the
// Charge steps and checks every result.
func runCharges(t *testing.T, p Params, steps []step) *machine {
	t.Helper()
	m := newMachine(p)
	for i, s := range steps {
		got := m.charge(s.at, s.n)
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Fatalf("step %d: Charge(%d) at %dµs = %+v, want %+v (-want +got):\n%s", i, s.n, s.at, got, s.want, diff)
		}
	}
	return m
}

const ms = 1000 // µs

func TestFixedWindowCharge(t *testing.T) {
	p := chargeParams(FixedWindow, 10, 0, sec)
	runCharges(t, p, []step{
		{0, 4, allowed(6, sec)},
		{100 * ms, 8, denied(0, 900*ms, 900*ms)}, // 12 counted
		{200 * ms, 0, denied(0, 800*ms, 800*ms)}, // in debt: a cost of 0 is denied
		{200 * ms, 1, denied(0, 800*ms, 800*ms)},
		{sec, 0, allowed(10, 0)},       // the window moved on
		{sec, 25, denied(0, sec, sec)}, // more than the capacity: charged, never admitted
		{1500 * ms, 0, denied(0, 500*ms, 500*ms)},
		{2 * sec, 10, allowed(0, sec)},
		{2 * sec, 0, allowed(0, sec)}, // spent exactly, not in debt
		{2 * sec, 1, denied(0, sec, sec)},
	})
}

func TestSlidingWindowCharge(t *testing.T) {
	p := chargeParams(SlidingWindow, 10, 0, sec)
	m := runCharges(t, p, []step{
		{0, 15, denied(0, 1_333_334, 2*sec)}, // 15 counted
		// At 1.333333s, floor(15 × 0.666667) = 10 still fills the window.
		{1_333_333, 0, allowed(0, 666_667)},
		// Counted all the same: then floor(15 × 0.599999) = 8, and 8 + 1 + 1
		// fits at 1.400001s.
		{1_333_333, 1, denied(0, 66_668, 1_666_667)},
		{1_333_334, 0, allowed(0, 1_666_666)},
	})
	if want := (Counter{Start: sec, Prev: 15, Cur: 1}); m.c != want {
		t.Errorf("state = %+v, want %+v", m.c, want)
	}
	runCharges(t, p, []step{
		{0, 4, allowed(6, 2*sec)},
		{500 * ms, 0, allowed(6, 1500*ms)},
		// 104 in the window: in the next, floor(104 × (1 - e)) <= 9 from
		// e = 0.903847s.
		{500 * ms, 100, denied(0, 1_403_847, 1500*ms)},
		{2 * sec, 0, allowed(10, 0)},
	})
}

func TestGCRACharge(t *testing.T) {
	for _, k := range []Kind{GCRA, TokenBucket} {
		p := chargeParams(k, 10, 5, sec) // T = 100ms, burst 5
		runCharges(t, p, []step{
			{0, 3, allowed(2, 300*ms)},
			{0, 4, denied(0, 300*ms, 700*ms)}, // TAT 700ms: 200ms beyond the burst
			{0, 0, denied(0, 200*ms, 700*ms)},
			{200 * ms, 0, allowed(0, 500*ms)},
			{300 * ms, 1, allowed(0, 500*ms)},
			{10 * sec, 20, denied(0, 1600*ms, 2*sec)}, // 4 times the burst, charged
			{11600 * ms, 1, allowed(0, 500*ms)},
		})
	}
}

// TestChargeDebtBound: no sequence of charges takes a key beyond its debt
// bound, and the largest charges neither overflow nor lose precision.
func TestChargeDebtBound(t *testing.T) {
	const maxCharge = math.MaxInt32
	t.Run("fixed window", func(t *testing.T) {
		p := chargeParams(FixedWindow, 10, 0, sec)
		w, r := FixedWindowCharge(Window{Start: 0, Count: MaxCountDebt - 5}, 1, p, maxCharge)
		if w.Count != MaxCountDebt || r.Allowed || r.RetryAfter != sec-1 {
			t.Errorf("Charge(%d) near the bound = %+v, %+v, want count %d, denied until the window's end", maxCharge, w, r, int64(MaxCountDebt))
		}
	})
	t.Run("sliding window", func(t *testing.T) {
		p := chargeParams(SlidingWindow, 10, 0, 24*3600*sec)
		c := Counter{}
		var r Result
		for range 100 {
			c, r = SlidingWindowCharge(c, 0, p, maxCharge)
		}
		if c.Cur != p.Debt || c.Cur*p.Period >= MaxExact || r.Allowed {
			t.Errorf("after 100 charges of %d: %+v, %+v, want Cur = %d (Cur × Period below 2^53)", maxCharge, c, r, p.Debt)
		}
		// The next window weighs the whole debt: exact, and admitting only
		// when floor(Debt × (P-e)/P) <= Rate - 1.
		c, r = SlidingWindowCharge(c, p.Period+1, p, 0)
		if r.Allowed || r.RetryAfter <= 0 || r.RetryAfter >= p.Period {
			t.Errorf("peek in the next window = %+v, want denied within the window", r)
		}
	})
	for _, k := range []Kind{GCRA, TokenBucket} {
		t.Run(kindName(k), func(t *testing.T) {
			p := chargeParams(k, 1, 0, 24*3600*sec) // P = 8.64e10: n*P overflows int64 for n = MaxInt32
			s, r := GCRACharge(TAT{}, 0, p, maxCharge)
			if got := chargeDeficit(s, 0, p); got != MaxBucketDebt || r.Allowed || r.ResetAfter != MaxBucketDebt {
				t.Errorf("Charge(%d) = %+v, %+v (deficit %d), want the deficit at its bound %d", maxCharge, s, r, got, int64(MaxBucketDebt))
			}
			s2, r2 := GCRACharge(s, 0, p, maxCharge)
			if s2 != s || r2.RetryAfter != MaxBucketDebt+p.P-p.Cap*p.P {
				t.Errorf("a charge at the bound = %+v, %+v, want the state kept at %+v", s2, r2, s)
			}
			// A refund of MaxInt32 gives back everything, without overflow.
			if got := GCRAReturn(s, 0, 0, p, maxCharge); got != (TAT{}) {
				t.Errorf("Return(%d) = %+v, want an untouched key", maxCharge, got)
			}
		})
	}
}

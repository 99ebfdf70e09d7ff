package algo

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// op is one request of a sequence: dt µs after the previous one, for n.
type op struct{ dt, n int64 }

// retryBound is a wait after which any n <= Cap is admitted on an idle key.
func retryBound(p Params) int64 {
	return 2*p.Period + ceilDiv(p.Cap*p.P, p.R) + 1
}

// checkSteps runs ops (time moving forward) from start through the step
// function of p and checks, at every step:
//   - the decision equals the reference model's, RetryAfter being the
//     earliest admitting time the reference finds by search;
//   - waiting RetryAfter admits, and 1µs less does not (on a copy);
//   - TokenBucket and GCRA decide alike;
//
// and, over the whole run, the invariants: no more than Rate units in any
// window of the fixed-window and sliding-log algorithms, and no more than
// Cap + Rate·t/P in any interval t for the buckets.
func checkSteps(t *testing.T, p Params, start int64, ops []op) {
	t.Helper()
	m, r := newMachine(p), newRef(p)
	var twin *machine
	switch p.Kind {
	case TokenBucket:
		q := p
		q.Kind = GCRA
		twin = newMachine(q)
	case GCRA:
		q := p
		q.Kind = TokenBucket
		twin = newMachine(q)
	}
	var adm []admission
	now := start
	at := func(i int) string {
		return fmt.Sprintf("%s step %d (%d ops from %d): Allow(%d) at %d", describe(p), i, len(ops), start, ops[i].n, now)
	}
	for i, o := range ops {
		now += o.dt
		n := o.n
		want := r.decide(now, n)
		wantRetry := int64(0)
		if !want.ok {
			// Scan µs by µs for the windows and the log; bisect the
			// (rational, slower) bucket models.
			scan := p.Kind != TokenBucket && p.Kind != GCRA
			wantRetry = refRetry(r, now, n, retryBound(p), scan)
		}
		wantRes := Result{Allowed: want.ok, Remaining: want.remaining, RetryAfter: wantRetry, ResetAfter: want.reset}
		before := m.state(now)
		pre := m.clone()
		got := m.step(now, n)
		if diff := cmp.Diff(wantRes, got); diff != "" {
			t.Fatalf("%s = %+v, reference %+v (-ref +got):\n%s", at(i), got, wantRes, diff)
		}
		if after := m.state(now); (!got.Allowed || n == 0) && after != before {
			t.Fatalf("%s = %+v changed the state from %s to %s", at(i), got, before, after)
		}
		if !got.Allowed {
			if r := m.clone().step(now+got.RetryAfter, n); !r.Allowed {
				t.Fatalf("%s = %+v, but after RetryAfter: %+v", at(i), got, r)
			}
			if r := m.clone().step(now+got.RetryAfter-1, n); r.Allowed {
				t.Fatalf("%s = %+v, and 1µs before RetryAfter already %+v", at(i), got, r)
			}
		}
		if twin != nil {
			if tw := twin.step(now, n); tw != got {
				t.Fatalf("%s = %+v, but %s decides %+v", at(i), got, kindString(twin.p.Kind), tw)
			}
		}
		if got.Allowed && n > 0 {
			checkReturn(t, pre, now, n, ops[i+1:])
			r.commit(now, n)
			adm = append(adm, admission{now, n})
		}
	}
	switch p.Kind {
	case FixedWindow:
		for w, c := range r.(*fixedRef).counts {
			if c > p.Rate {
				t.Fatalf("%s: %d admitted in window %d", describe(p), c, w)
			}
		}
	case SlidingLog:
		if got := maxInWindow(adm, p.Period); got > p.Rate {
			t.Fatalf("%s: %d admitted within one Period, more than Rate %d: %v", describe(p), got, p.Rate, adm)
		}
	case TokenBucket, GCRA:
		if i, j, bad := bucketExcess(adm, p.Rate, p.Period, p.Cap); bad {
			t.Fatalf("%s: admissions %d..%d (%v) exceed Cap + Rate·t/P", describe(p), i, j, adm[i:j+1])
		}
	}
}

// checkReturn: admitting n at now and returning them at once leaves a
// state that decides the next requests exactly as if they had never been
// admitted.
func checkReturn(t *testing.T, pre *machine, now, n int64, next []op) {
	t.Helper()
	returned := pre.clone()
	returned.step(now, n)
	returned.ret(now, n)
	for i, o := range next[:min(len(next), 4)] {
		now += o.dt
		want, got := pre.step(now, o.n), returned.step(now, o.n)
		if want != got {
			t.Fatalf("%s: after admitting %d and returning them, request %d (Allow(%d) at %d) = %+v, want %+v as if never admitted", describe(pre.p), n, i, o.n, now, got, want)
		}
	}
}

// checkSane runs ops, time going backwards at times, and checks what holds
// whatever the clock does: sane results, and denials and peeks that change
// nothing.
func checkSane(t *testing.T, p Params, start int64, ops []op) {
	t.Helper()
	m := newMachine(p)
	now, latest := start, start
	for i, o := range ops {
		now += o.dt
		latest = max(latest, now)
		// Waits count from the clamped time, or (the buckets) from the TAT: at
		// most how far the clock went back beyond an idle key's.
		bound := retryBound(p) + latest - now
		before := m.state(now)
		got := m.step(now, o.n)
		ok := got.Remaining >= 0 && got.Remaining <= p.Cap &&
			got.ResetAfter >= 0 && got.ResetAfter <= bound &&
			got.Allowed == (got.RetryAfter == 0) &&
			got.RetryAfter >= 0 && got.RetryAfter <= bound &&
			(o.n > 0 || got.Allowed) &&
			(!got.Allowed || o.n == 0 || got.ResetAfter > 0)
		if !ok {
			t.Fatalf("%s step %d: Allow(%d) at %d = %+v: out of bounds (bound %d)", describe(p), i, o.n, now, got, bound)
		}
		if after := m.state(now); (!got.Allowed || o.n == 0) && after != before {
			t.Fatalf("%s step %d: Allow(%d) at %d = %+v changed the state from %s to %s", describe(p), i, o.n, now, got, before, after)
		}
	}
}

var kinds = []Kind{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, GCRA}

func kindString(k Kind) string {
	return [...]string{"?", "fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra"}[min(int(k), 5)]
}

func describe(p Params) string {
	return fmt.Sprintf("%d per %dµs (%s, cap %d)", p.Rate, p.Period, kindString(p.Kind), p.Cap)
}

// randomRun draws a limit with a short period and a sequence of requests
// whose gaps are mostly shorter than the period.
func randomRun(rng *rand.Rand, k Kind, maxRate, maxPeriod int64, backwards bool) (Params, int64, []op) {
	rate := 1 + rng.Int64N(maxRate)
	period := 1 + rng.Int64N(maxPeriod)
	burst := int64(0)
	if k == TokenBucket || k == GCRA {
		burst = rng.Int64N(2*maxRate + 1)
	}
	p := NewParams(k, rate, burst, period)
	start := rng.Int64N(1<<40) - 1<<39
	ops := make([]op, 1+rng.IntN(80))
	for i := range ops {
		switch rng.IntN(4) {
		case 0:
			ops[i].dt = 0
		case 1:
			ops[i].dt = rng.Int64N(p.Period/max(p.Rate, 1) + 2)
		case 2:
			ops[i].dt = rng.Int64N(p.Period + 1)
		default:
			ops[i].dt = rng.Int64N(3*p.Period + 1)
		}
		if backwards && rng.IntN(5) == 0 {
			ops[i].dt = -rng.Int64N(3*p.Period + 1)
		}
		ops[i].n = rng.Int64N(p.Cap + 1)
		if rng.IntN(3) == 0 {
			ops[i].n = min(1, p.Cap)
		}
	}
	return p, start, ops
}

// TestStepProperties checks random runs of every algorithm against the
// reference models, with periods short enough to scan µs by µs.
func TestStepProperties(t *testing.T) {
	runs := 300
	if testing.Short() {
		runs = 50
	}
	for _, k := range kinds {
		t.Run(kindString(k), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(k), 1))
			for range runs {
				p, start, ops := randomRun(rng, k, 12, 60, false)
				checkSteps(t, p, start, ops)
			}
		})
	}
}

// TestStepPropertiesLongPeriods does the same with periods of up to 10s
// and rates up to 1000, finding RetryAfter in the reference by bisection.
func TestStepPropertiesLongPeriods(t *testing.T) {
	runs := 60
	if testing.Short() {
		runs = 15
	}
	for _, k := range kinds {
		t.Run(kindString(k), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(k), 2))
			for range runs {
				p, start, ops := randomRun(rng, k, 1000, 10*sec, false)
				checkSteps(t, p, start, ops)
			}
		})
	}
}

// TestStepBackwards checks runs whose clock sometimes runs backwards.
func TestStepBackwards(t *testing.T) {
	for _, k := range kinds {
		t.Run(kindString(k), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(k), 3))
			for range 300 {
				p, start, ops := randomRun(rng, k, 12, 60, true)
				checkSane(t, p, start, ops)
			}
		})
	}
}

// fuzzRun decodes a fuzz input into a small limit and a request sequence:
// two bytes per request, the gap (signed when backwards) and n.
func fuzzRun(kind, rate, burst uint8, period uint16, start int64, data []byte, backwards bool) (Params, int64, []op) {
	k := Kind(1 + kind%5)
	b := int64(0)
	if k == TokenBucket || k == GCRA {
		b = int64(burst % 25)
	}
	p := NewParams(k, 1+int64(rate%16), b, 1+int64(period%200))
	start %= 1 << 45
	ops := make([]op, 0, len(data)/2)
	for i := 0; i+1 < len(data) && len(ops) < 100; i += 2 {
		dt := int64(data[i]) % (3*p.Period + 2)
		if backwards {
			dt = int64(int8(data[i])) % (3*p.Period + 2)
		}
		ops = append(ops, op{dt: dt, n: int64(data[i+1]) % (p.Cap + 1)})
	}
	return p, start, ops
}

func addSeeds(f *testing.F) {
	f.Add(uint8(0), uint8(2), uint8(0), uint16(9), int64(1_000_000), []byte{0, 1, 0, 2, 3, 1, 5, 3, 9, 1, 0, 0})
	f.Add(uint8(1), uint8(4), uint8(0), uint16(19), int64(-77), []byte{0, 2, 1, 2, 2, 1, 30, 4, 7, 1, 1, 1, 19, 3})
	f.Add(uint8(2), uint8(9), uint8(0), uint16(99), int64(12345), []byte{0, 10, 50, 5, 10, 9, 200, 1, 3, 4, 97, 2})
	f.Add(uint8(3), uint8(2), uint8(1), uint16(999), int64(3), []byte{0, 2, 0, 2, 100, 1, 250, 2, 1, 1})
	f.Add(uint8(4), uint8(6), uint8(1), uint16(0), int64(1<<40), []byte{0, 2, 1, 1, 0, 2, 2, 2, 0, 0})
	f.Add(uint8(4), uint8(2), uint8(7), uint16(3), int64(-1<<40), []byte{0, 7, 1, 7, 2, 1, 9, 3, 0, 5})
}

// FuzzStep checks fuzzed runs against the reference models (time forward).
func FuzzStep(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, kind, rate, burst uint8, period uint16, start int64, data []byte) {
		p, start, ops := fuzzRun(kind, rate, burst, period, start, data, false)
		checkSteps(t, p, start, ops)
	})
}

// FuzzStepBackwards checks fuzzed runs whose clock may run backwards.
func FuzzStepBackwards(f *testing.F) {
	addSeeds(f)
	f.Add(uint8(3), uint8(3), uint8(5), uint16(50), int64(100), []byte{10, 3, 0xf0, 1, 0x80, 2, 5, 1, 0xff, 2})
	f.Fuzz(func(t *testing.T, kind, rate, burst uint8, period uint16, start int64, data []byte) {
		p, start, ops := fuzzRun(kind, rate, burst, period, start, data, true)
		checkSane(t, p, start, ops)
	})
}

// TestLimitChange: a key's state is kept when its limit's Rate or Burst
// changes (state identity is key, algorithm and period). Whatever the
// earlier limit counted, every decision under the new one stays sane: a
// peek is allowed, Remaining is within [0, Cap], and waiting RetryAfter
// admits while 1µs less does not.
func TestLimitChange(t *testing.T) {
	for _, k := range kinds {
		t.Run(kindString(k), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(k), 4))
			for range 300 {
				period := 1 + rng.Int64N(60)
				variants := make([]Params, 3)
				for i := range variants {
					burst := int64(0)
					if k == TokenBucket || k == GCRA {
						burst = rng.Int64N(20)
					}
					variants[i] = NewParams(k, 1+rng.Int64N(15), burst, period)
				}
				m := newMachine(variants[0])
				now := rng.Int64N(1 << 40)
				for i := range 60 {
					m.p = variants[rng.IntN(len(variants))]
					now += rng.Int64N(period + 1)
					n := rng.Int64N(m.p.Cap + 1)
					got := m.step(now, n)
					if got.Remaining < 0 || got.Remaining > m.p.Cap || got.Allowed != (got.RetryAfter == 0) || (n == 0 && !got.Allowed) {
						t.Fatalf("%s step %d: Allow(%d) at %d = %+v", describe(m.p), i, n, now, got)
					}
					if got.Allowed {
						continue
					}
					if r := m.clone().step(now+got.RetryAfter, n); !r.Allowed {
						t.Fatalf("%s step %d: Allow(%d) at %d = %+v, but after RetryAfter: %+v", describe(m.p), i, n, now, got, r)
					}
					if r := m.clone().step(now+got.RetryAfter-1, n); r.Allowed {
						t.Fatalf("%s step %d: Allow(%d) at %d = %+v, and 1µs before RetryAfter already %+v (state %s)", describe(m.p), i, n, now, got, r, m.state(now))
					}
				}
			}
		})
	}
}

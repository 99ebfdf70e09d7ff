package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// retryLimits are the limits of RetryAfterExact: odd rates and periods, so
// that the closed forms and the fractions of a µs are exercised, and a
// sliding log of 100,000 asked costs of any size, so that the unit whose
// expiry admits a request lies among entries of many units.
var retryLimits = []sluice.Limit{
	{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Second},
	{Algorithm: sluice.FixedWindow, Rate: 5, Period: 700 * ms},
	{Algorithm: sluice.SlidingLog, Rate: 3, Period: time.Second},
	{Algorithm: sluice.SlidingLog, Rate: 5, Period: 700 * ms},
	{Algorithm: sluice.SlidingLog, Rate: 100_000, Period: 2 * time.Second},
	{Algorithm: sluice.SlidingWindow, Rate: 4, Period: time.Second},
	{Algorithm: sluice.SlidingWindow, Rate: 3, Period: 700 * ms},
	{Algorithm: sluice.TokenBucket, Rate: 3, Period: time.Second, Burst: 5},
	{Algorithm: sluice.TokenBucket, Rate: 7, Period: 3 * time.Second, Burst: 2},
	{Algorithm: sluice.GCRA, Rate: 3, Period: time.Second, Burst: 5},
	{Algorithm: sluice.GCRA, Rate: 7, Period: 3 * time.Second, Burst: 2},
}

// testRetryAfterExact: after a denial, waiting RetryAfter admits the same
// request and waiting 1µs less does not (then RetryAfter is exactly 1µs).
// On real time: RetryAfter - tolerance denies, RetryAfter + tolerance admits.
func (s *suite) testRetryAfterExact(t *testing.T) {
	g := s.group(t)
	defer g.wait()
	for i, lim := range retryLimits {
		if !s.cfg.decides(lim.Algorithm) {
			continue
		}
		g.run(fmt.Sprintf("%v_%v_%d", lim.Algorithm, lim.Period, lim.Rate), func(t *testing.T) {
			e := s.env(t, 0)
			lim := e.lim(lim)
			key := newKey(t)
			rng := rand.New(rand.NewPCG(7, uint64(i)))
			iters, checks, denied, slow := 60, 0, 0, 0
			if !e.exact() {
				iters = 20
			}
			for range iters {
				if !e.exact() && checks >= 3 {
					break
				}
				e.sleep(time.Duration(rng.Int64N(int64(lim.Period / 3))).Truncate(µs))
				n := 1 + rng.IntN(lim.Capacity())
				before := time.Now()
				d := e.allow(key, lim, n)
				if d.Allowed {
					continue
				}
				denied++
				if !e.exact() && time.Since(before) > s.cfg.tol/2 {
					slow++
					continue // too slow a call to bracket the store's time
				}
				r := d.RetryAfter
				if e.exact() {
					e.sleep(r - µs)
					early := e.allow(key, lim, n)
					if early.Allowed || early.RetryAfter != µs {
						t.Fatalf("AllowN(%q, %d) 1µs before its RetryAfter %v = %+v, want denied with RetryAfter 1µs", key, n, r, early)
					}
					e.sleep(µs)
					if late := e.allow(key, lim, n); !late.Allowed {
						t.Fatalf("AllowN(%q, %d) after its RetryAfter %v = %+v, want allowed", key, n, r, late)
					}
					checks++
					continue
				}
				if s.cfg.denyEarly {
					continue
				}
				tol := s.cfg.tol
				if r > 2*tol {
					time.Sleep(time.Until(before.Add(r - tol)))
					if early := e.allow(key, lim, n); early.Allowed {
						if time.Since(before) < r {
							t.Fatalf("AllowN(%q, %d) %v before its RetryAfter %v = %+v, want denied", key, n, tol, r, early)
						}
						continue // the call came too late to tell
					}
				}
				time.Sleep(time.Until(before.Add(r + tol)))
				if late := e.allow(key, lim, n); !late.Allowed {
					t.Fatalf("AllowN(%q, %d) %v after its RetryAfter %v = %+v, want allowed", key, n, tol, r, late)
				}
				checks++
			}
			switch {
			case denied == 0:
				t.Fatalf("no request was denied in %d tries: the case checked nothing", iters)
			case checks == 0:
				// Real time only: every denial came from a call slower
				// than half the tolerance, which a machine busy with other
				// work makes; the store's own time cannot be bracketed then.
				// The cases on a test clock (WithClock) check it exactly.
				t.Skipf("%d denials, each from a call slower than %v: too busy a machine to bracket the store's time", slow, s.cfg.tol/2)
			}
		})
	}
}

// eachLongLimit runs f in a subtest per algorithm, with a fresh store, the
// algorithm's longLimit and a fresh key.
func (s *suite) eachLongLimit(t *testing.T, f func(t *testing.T, e *env, lim sluice.Limit, key string)) {
	for _, a := range s.cfg.only(algorithms) {
		t.Run(a.String(), func(t *testing.T) {
			f(t, s.env(t, 0), longLimit(a), newKey(t))
		})
	}
}

// longLimit is a limit of each algorithm whose period is long enough that
// cases on real time do not see it move.
func longLimit(a sluice.Algorithm) sluice.Limit {
	l := sluice.Limit{Algorithm: a, Rate: 3, Period: time.Hour}
	if a == sluice.TokenBucket || a == sluice.GCRA {
		l.Burst = 5
	}
	return l
}

// testPeek: n = 0 is always allowed, reports Remaining and changes nothing.
func (s *suite) testPeek(t *testing.T) {
	s.eachLongLimit(t, func(t *testing.T, e *env, lim sluice.Limit, key string) {
		c := lim.Capacity()
		if d := e.allow(key, lim, 0); d != (sluice.Decision{Allowed: true, Limit: lim, Remaining: c}) {
			t.Errorf("peek of an untouched key = %+v, want allowed, Remaining %d, ResetAfter 0", d, c)
		}
		d1 := e.allow(key, lim, 1)
		for range 3 {
			d := e.allow(key, lim, 0)
			if !d.Allowed || d.Remaining != c-1 {
				t.Errorf("peek after one admission = %+v, want allowed, Remaining %d", d, c-1)
			}
			if e.exact() && d.ResetAfter != d1.ResetAfter {
				t.Errorf("peek ResetAfter = %v, want the admission's %v", d.ResetAfter, d1.ResetAfter)
			}
		}
		e.allow(key, lim, c-1)
		if d := e.allow(key, lim, 0); !d.Allowed || d.Remaining != 0 || d.RetryAfter != 0 {
			t.Errorf("peek of a full key = %+v, want allowed, Remaining 0, RetryAfter 0", d)
		}
		if d := e.allow(key, lim, 1); d.Allowed {
			t.Errorf("AllowN(1) after peeks on a full key = %+v, want denied", d)
		}
	})
}

// testExceedsCapacity: n > Capacity is an error, never a RetryAfter, and
// counts nothing; a negative n is ErrInvalidCost.
func (s *suite) testExceedsCapacity(t *testing.T) {
	s.eachLongLimit(t, func(t *testing.T, e *env, lim sluice.Limit, key string) {
		c := lim.Capacity()
		for _, n := range []int{c + 1, 2 * c, 1 << 40} {
			if d, err := e.s.AllowN(context.Background(), key, lim, n); !errors.Is(err, sluice.ErrExceedsCapacity) || !namesField(err, "N") {
				t.Errorf("AllowN(%q, %v, %d) = %+v, %v, want ErrExceedsCapacity in a *sluice.LimitError of Field N", key, lim, n, d, err)
			}
		}
		e.allow(key, lim, 1)
		if d, err := e.s.AllowN(context.Background(), key, lim, c); err != nil || d.Allowed || d.RetryAfter <= 0 {
			t.Errorf("AllowN(%d) on a used key = %+v, %v, want a denial with a RetryAfter (n = Capacity is never an error)", c, d, err)
		}
		if d, err := e.s.AllowN(context.Background(), key, lim, -1); !errors.Is(err, sluice.ErrInvalidCost) || !namesField(err, "N") {
			t.Errorf("AllowN(%q, %v, -1) = %+v, %v, want ErrInvalidCost in a *sluice.LimitError of Field N", key, lim, d, err)
		}
		if d := e.allow(key, lim, 0); d.Remaining != c-1 {
			t.Errorf("peek after invalid costs = %+v, want Remaining %d (nothing counted)", d, c-1)
		}
	})
}

// testInvalidLimit: every invalid field gives ErrInvalidLimit naming it,
// in its text and as a *sluice.LimitError.
func (s *suite) testInvalidLimit(t *testing.T) {
	tests := []struct {
		name  string
		give  sluice.Limit
		field string
	}{
		{"AlgorithmUnset", sluice.Limit{Rate: 1, Period: time.Second}, "Algorithm"},
		{"AlgorithmUnknown", sluice.Limit{Algorithm: 99, Rate: 1, Period: time.Second}, "Algorithm"},
		{"RateZero", sluice.Limit{Algorithm: sluice.GCRA, Rate: 0, Period: time.Second}, "Rate"},
		{"RateNegative", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: -1, Period: time.Second}, "Rate"},
		{"PeriodZero", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1}, "Period"},
		{"PeriodShort", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: 999 * µs}, "Period"},
		{"PeriodNegative", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: -time.Second}, "Period"},
		{"PeriodFractionalµs", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1, Period: time.Second + 500}, "Period"},
		{"BurstNegative", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Second, Burst: -1}, "Burst"},
		{"BurstOnWindow", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Second, Burst: 2}, "Burst"},
		{"TooLarge", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1 << 40, Period: 24 * time.Hour}, "Rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := s.env(t, 0)
			for _, n := range []int{0, 1} {
				d, err := e.s.AllowN(context.Background(), newKey(t), tt.give, n)
				if !errors.Is(err, sluice.ErrInvalidLimit) {
					t.Fatalf("AllowN(%+v, %d) = %+v, %v, want ErrInvalidLimit", tt.give, n, d, err)
				}
				if !strings.Contains(err.Error(), tt.field) || !namesField(err, tt.field) {
					t.Errorf("AllowN(%+v) error %q does not name the field %s (in its text and as a *sluice.LimitError)", tt.give, err, tt.field)
				}
			}
		})
	}
}

// namesField reports whether err holds a *sluice.LimitError for field.
func namesField(err error, field string) bool {
	var le *sluice.LimitError
	return errors.As(err, &le) && le.Field == field
}

// testInvalidKey: empty keys and keys over MaxKeyLen bytes are
// ErrInvalidKey; a key of exactly MaxKeyLen bytes is fine.
func (s *suite) testInvalidKey(t *testing.T) {
	e := s.env(t, 0)
	lim := longLimit(sluice.GCRA)
	for _, key := range []string{"", strings.Repeat("k", sluice.MaxKeyLen+1), strings.Repeat("\xff", 4096)} {
		if d, err := e.s.AllowN(context.Background(), key, lim, 1); !errors.Is(err, sluice.ErrInvalidKey) || !namesField(err, "Key") {
			t.Errorf("AllowN(key of %d bytes) = %+v, %v, want ErrInvalidKey in a *sluice.LimitError of Field Key", len(key), d, err)
		}
	}
	key := newKey(t)
	key += strings.Repeat("k", sluice.MaxKeyLen-len(key))
	if d := e.allow(key, lim, 1); !d.Allowed || d.Remaining != lim.Capacity()-1 {
		t.Errorf("AllowN(key of %d bytes) = %+v, want allowed", len(key), d)
	}
}

// testKeyBytes: keys are opaque bytes. Keys with hash-tag braces, colons,
// NUL and invalid UTF-8, which a Redis store must escape, each get their
// own state.
func (s *suite) testKeyBytes(t *testing.T) {
	for _, a := range s.cfg.only(algorithms) {
		t.Run(a.String(), func(t *testing.T) {
			e := s.env(t, 0)
			lim := longLimit(a)
			c := lim.Capacity()
			r := fmt.Sprintf("%x", rand.Uint64())
			var keys []string
			for _, tmpl := range []string{
				"R", "{R}", "{R", "R}", "}R", "R{", "{}R", "R{}", "{R}:x", "R:", "R:0", ":R",
				"R\x00", "R\x00x", "\x00R", "\xffR", "R\xfe\xff", "sluice:{R}:fw", "sluice:{R}", "R\\", "R\\}",
			} {
				keys = append(keys, strings.ReplaceAll(tmpl, "R", r))
			}
			for i, k := range keys {
				if d := e.allow(k, lim, c); !d.Allowed {
					t.Errorf("AllowN(%q, %d) on a fresh key = %+v, want allowed", k, c, d)
				}
				if d := e.allow(k, lim, 1); d.Allowed {
					t.Errorf("AllowN(%q, 1) on a full key = %+v, want denied", k, d)
				}
				for _, k2 := range keys[i+1:] {
					if d := e.allow(k2, lim, 0); d.Remaining != c {
						t.Errorf("after filling %q, peek of %q = %+v, want Remaining %d (its own state)", k, k2, d, c)
					}
				}
			}
		})
	}
}

// testDeniedNotCounted: a denied request changes no state.
func (s *suite) testDeniedNotCounted(t *testing.T) {
	s.eachLongLimit(t, func(t *testing.T, e *env, lim sluice.Limit, key string) {
		c := lim.Capacity()
		e.allow(key, lim, c-1)
		for range 10 {
			if d := e.allow(key, lim, 2); d.Allowed {
				t.Fatalf("AllowN(2) with 1 remaining = %+v, want denied", d)
			}
		}
		if d := e.allow(key, lim, 1); !d.Allowed || d.Remaining != 0 {
			t.Errorf("AllowN(1) after ten denials = %+v, want allowed, Remaining 0", d)
		}
	})
}

// testStateIdentity: state is per (key, algorithm, period). One key holds a
// state per period and per algorithm; changing Rate keeps the count.
func (s *suite) testStateIdentity(t *testing.T) {
	t.Run("Periods", func(t *testing.T) {
		for _, a := range s.cfg.only(algorithms) {
			e := s.env(t, 0)
			key := newKey(t)
			hour := longLimit(a)
			twoHours := hour
			twoHours.Period = 2 * time.Hour
			e.allow(key, hour, hour.Capacity())
			if d := e.allow(key, twoHours, 0); d.Remaining != twoHours.Capacity() {
				t.Errorf("%v: after filling %v, peek of %v on the same key = %+v, want Remaining %d", a, hour, twoHours, d, twoHours.Capacity())
			}
			if d := e.allow(key, twoHours, 1); !d.Allowed {
				t.Errorf("%v: AllowN(%v) = %+v, want allowed", a, twoHours, d)
			}
			if d := e.allow(key, hour, 1); d.Allowed {
				t.Errorf("%v: AllowN(%v) on the full state = %+v, want denied", a, hour, d)
			}
		}
	})
	t.Run("Algorithms", func(t *testing.T) {
		e := s.env(t, 0)
		key := newKey(t)
		algs := s.cfg.only(algorithms)
		for i, a := range algs {
			lim := longLimit(a)
			if d := e.allow(key, lim, lim.Capacity()); !d.Allowed {
				t.Errorf("AllowN(%v, %d) after filling %v on the same key = %+v, want allowed (its own state)", lim, lim.Capacity(), algs[:i], d)
			}
		}
	})
	t.Run("RateChange", func(t *testing.T) {
		for _, a := range s.cfg.only([]sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow}) {
			e := s.env(t, 0)
			key := newKey(t)
			two := sluice.Limit{Algorithm: a, Rate: 2, Period: time.Hour}
			three := two
			three.Rate = 3
			e.allow(key, two, 2)
			if d := e.allow(key, three, 0); d.Remaining != 1 {
				t.Errorf("%v: after 2 admitted under %v, peek under %v = %+v, want Remaining 1 (the count is kept)", a, two, three, d)
			}
		}
		// The buckets keep the time they are full again: their missing
		// tokens count at the new Rate (5 of 10/h missing is half an hour,
		// 3.5 of 7/h; 5 of 7/h is 5/7 of an hour, 7.14 of 10/h).
		for _, a := range s.cfg.only([]sluice.Algorithm{sluice.TokenBucket, sluice.GCRA}) {
			ten := sluice.Limit{Algorithm: a, Rate: 10, Period: time.Hour}
			seven := ten
			seven.Rate = 7
			for _, tt := range []struct {
				from, to sluice.Limit
				want     int
			}{{ten, seven, 3}, {seven, ten, 2}} {
				e := s.env(t, 0)
				key := newKey(t)
				e.allow(key, tt.from, 5)
				if d := e.allow(key, tt.to, 0); d.Remaining != tt.want {
					t.Errorf("%v: after 5 admitted under %v, peek under %v = %+v, want Remaining %d", a, tt.from, tt.to, d, tt.want)
				}
			}
		}
	})
}

// testCancelledContext: a cancelled or expired context is an error, and
// nothing is counted.
func (s *suite) testCancelledContext(t *testing.T) {
	s.eachLongLimit(t, func(t *testing.T, e *env, lim sluice.Limit, key string) {
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		if d, err := e.s.AllowN(cancelled, key, lim, 1); !errors.Is(err, context.Canceled) {
			t.Errorf("AllowN(cancelled ctx) = %+v, %v, want context.Canceled", d, err)
		}
		expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel2()
		if d, err := e.s.AllowN(expired, key, lim, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("AllowN(expired ctx) = %+v, %v, want context.DeadlineExceeded", d, err)
		}
		reqs := []sluice.Request{{Key: key, Limit: lim, N: 1}}
		if ds, err := e.f.AllowMulti(cancelled, reqs); !errors.Is(err, sluice.ErrMultiUnsupported) && !errors.Is(err, context.Canceled) {
			t.Errorf("AllowMulti(cancelled ctx) = %+v, %v, want context.Canceled", ds, err)
		}
		if d := e.allow(key, lim, 0); d.Remaining != lim.Capacity() {
			t.Errorf("peek after cancelled calls = %+v, want Remaining %d (nothing counted)", d, lim.Capacity())
		}
	})
}

// testRealClock checks, when the cases ran on a fake clock, that the store
// from Run's own constructor keeps time on its own.
func (s *suite) testRealClock(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 100 * ms}
	key := newKey(t)
	// Two calls in a row are denied the second time, unless the machine
	// stalled a whole period between them: then try again.
	var d sluice.Decision
	for try := 0; ; try++ {
		var err error
		d, err = st.AllowN(ctx, key, lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
		if try == 10 {
			t.Fatalf("10 calls in a row under %v were all admitted: the store's clock runs too fast", lim)
		}
	}
	if d.RetryAfter <= 0 || d.RetryAfter > lim.Period {
		t.Fatalf("denied AllowN = %+v, want RetryAfter in (0, %v]", d, lim.Period)
	}
	time.Sleep(d.RetryAfter)
	if d, err := st.AllowN(ctx, key, lim, 1); err != nil || !d.Allowed {
		t.Fatalf("AllowN after sleeping RetryAfter on real time = %+v, %v, want allowed", d, err)
	}
}

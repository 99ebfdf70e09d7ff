package sluicetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testReset runs when the store can reset (sluice.Resetter): a used key,
// once reset, admits its full capacity again; the key's states under other
// algorithms and periods keep what they counted; resetting an untouched key
// is nil; a limit that counts every hit has its debt cleared; an invalid
// key or limit is a *sluice.LimitError naming the field.
func (s *suite) testReset(t *testing.T) {
	s.need(t, capReset)
	ctx := context.Background()
	algs := s.cfg.only(algorithms)
	for i, a := range algs {
		t.Run(a.String(), func(t *testing.T) {
			e := s.env(t, 0)
			rs := e.f
			lim, key := longLimit(a), newKey(t)
			c := lim.Capacity()
			otherPeriod := lim
			otherPeriod.Period = 2 * time.Hour
			others := []sluice.Limit{otherPeriod}
			if len(algs) > 1 { // another algorithm's state of the key
				others = append(others, longLimit(algs[(i+1)%len(algs)]))
			}
			for _, l := range append([]sluice.Limit{lim}, others...) {
				if d := e.allow(key, l, l.Capacity()); !d.Allowed {
					t.Fatalf("AllowN(%v, %d) on an untouched key = %+v, want allowed", l, l.Capacity(), d)
				}
			}
			if d := e.allow(key, lim, 1); d.Allowed {
				t.Fatalf("AllowN(1) past the capacity = %+v, want denied", d)
			}
			if err := rs.Reset(ctx, key, lim); err != nil {
				t.Fatalf("Reset(%q, %v): %v", key, lim, err)
			}
			if d := e.allow(key, lim, 0); !d.Allowed || d.Remaining != c {
				t.Errorf("AllowN(0) after Reset = %+v, want allowed, Remaining %d", d, c)
			}
			if d := e.allow(key, lim, c); !d.Allowed {
				t.Errorf("AllowN(%d) after Reset = %+v, want allowed (the full capacity)", c, d)
			}
			for _, l := range others {
				if d := e.allow(key, l, 1); d.Allowed {
					t.Errorf("AllowN(%v, 1) after resetting %v = %+v, want denied (its state untouched)", l, lim, d)
				}
			}
			if err := rs.Reset(ctx, newKey(t), lim); err != nil {
				t.Errorf("Reset of an untouched key = %v, want nil", err)
			}
		})
	}
	t.Run("CountAllDebt", func(t *testing.T) {
		for _, a := range s.cfg.only(countingAlgorithms) {
			t.Run(a.String(), func(t *testing.T) {
				e := s.env(t, 0)
				rs := e.f
				lim, key := countAllLimit(a), newKey(t)
				c := lim.Capacity()
				e.allow(key, lim, 3*c)
				if d := e.allow(key, lim, 0); d.Allowed {
					t.Fatalf("AllowN(0) in debt = %+v, want denied", d)
				}
				if err := rs.Reset(ctx, key, lim); err != nil {
					t.Fatalf("Reset(%q, %v): %v", key, lim, err)
				}
				if d := e.allow(key, lim, 0); !d.Allowed || d.Remaining != c {
					t.Errorf("AllowN(0) after resetting a debt = %+v, want allowed, Remaining %d", d, c)
				}
				if d := e.allow(key, lim, c); !d.Allowed {
					t.Errorf("AllowN(%d) after resetting a debt = %+v, want allowed", c, d)
				}
			})
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		e := s.env(t, 0)
		rs := e.f
		good := longLimit(sluice.GCRA)
		bad := func(f func(*sluice.Limit)) sluice.Limit { l := good; f(&l); return l }
		tests := []struct {
			name  string
			key   string
			lim   sluice.Limit
			field string
		}{
			{"EmptyKey", "", good, "Key"},
			{"LongKey", strings.Repeat("k", sluice.MaxKeyLen+1), good, "Key"},
			{"Algorithm", "k", bad(func(l *sluice.Limit) { l.Algorithm = 99 }), "Algorithm"},
			{"Period", "k", bad(func(l *sluice.Limit) { l.Period = 0 }), "Period"},
			{"Rate", "k", bad(func(l *sluice.Limit) { l.Rate = 0 }), "Rate"},
			{"Counting", "k", countAllLimit(sluice.FixedWindow).With(sluice.SlidingLog), "Counting"},
		}
		for _, tt := range tests {
			err := rs.Reset(ctx, tt.key, tt.lim)
			if !namesField(err, tt.field) {
				t.Errorf("Reset(%s) = %v, want a *sluice.LimitError with Field %q", tt.name, err, tt.field)
			}
		}
	})
}

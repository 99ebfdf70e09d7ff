package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testUnsupported runs when WithAlgorithms left algorithms out: the store
// refuses each of them, for a cost, a peek, a limit counting every hit, a
// Lease, a Return and a Reset, with a *sluice.LimitError on "Algorithm"
// wrapping sluice.ErrInvalidLimit; and it counts nothing (the key's
// states under the algorithms it decides are untouched).
func (s *suite) testUnsupported(t *testing.T) {
	var refused []sluice.Algorithm
	for _, a := range algorithms {
		if !s.cfg.decides(a) {
			refused = append(refused, a)
		}
	}
	if len(refused) == 0 {
		t.Skip("the store decides every algorithm")
	}
	ctx := context.Background()
	for _, a := range refused {
		t.Run(a.String(), func(t *testing.T) {
			e := s.env(t, 0)
			key := newKey(t)
			lim := longLimit(a)
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, sluice.ErrInvalidLimit) || !namesField(err, "Algorithm") {
					t.Errorf("%s of %v = %v, want ErrInvalidLimit in a *sluice.LimitError of Field Algorithm", what, lim, err)
				}
			}
			for _, n := range []int{0, 1} {
				d, err := e.s.AllowN(ctx, key, lim, n)
				check(fmt.Sprintf("AllowN(n=%d)", n), err)
				if d.Allowed {
					t.Errorf("AllowN(%v, %d) refused with a Decision that admits: %+v", lim, n, d)
				}
			}
			if a != sluice.SlidingLog { // a log counting every hit is invalid anyway
				_, err := e.s.AllowN(ctx, key, lim.WithCounting(sluice.CountAll), 1)
				check("AllowN(CountAll)", err)
			}
			if ls, ok := e.s.(sluice.Leaser); ok {
				_, _, err := ls.Lease(ctx, key, lim, 1)
				check("Lease", err)
				check("Return", ls.Return(ctx, key, lim, 1, time.Time{}))
			}
			if rs, ok := e.s.(sluice.Resetter); ok {
				check("Reset", rs.Reset(ctx, key, lim))
			}
			for _, b := range s.cfg.only(algorithms) {
				ok := longLimit(b)
				if d := e.allow(key, ok, 0); d.Remaining != ok.Capacity() {
					t.Errorf("peek of %v after the refusals = %+v, want Remaining %d (nothing counted)", ok, d, ok.Capacity())
				}
			}
		})
	}
}

// needAll skips t when the store does not decide every algorithm: the
// AllowMulti cases combine them.
func (s *suite) needAll(t *testing.T) {
	t.Helper()
	if s.cfg.algs != nil && len(s.cfg.only(algorithms)) < len(algorithms) {
		t.Skipf("the AllowMulti cases combine every algorithm; the store decides %v", s.cfg.algs)
	}
}

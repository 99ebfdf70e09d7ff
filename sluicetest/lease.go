package sluicetest

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
)

// testLease runs when the store implements sluice.Leaser: a lease counts
// like an admission, and returning it restores the key, never beyond an
// untouched one.
func (s *suite) testLease(t *testing.T) {
	need[sluice.Leaser](t, s, "sluice.Leaser")
	ctx := context.Background()
	s.eachLongLimit(t, func(t *testing.T, e *env, lim sluice.Limit, key string) {
		ls := e.s.(sluice.Leaser)
		c := lim.Capacity()

		before := e.clockNow()
		d, at, err := ls.Lease(ctx, key, lim, c)
		after := e.clockNow()
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("Lease(%q, %v, %d) = %+v, %v, want allowed, Remaining 0", key, lim, c, d, err)
		}
		checkDecision(t, d, lim, c)
		if at.Before(before.Add(-e.slack())) || at.After(after.Add(e.slack())) {
			t.Errorf("Lease time %v, want within [%v, %v]", at, before, after)
		}
		if d := e.allow(key, lim, 1); d.Allowed {
			t.Errorf("AllowN(1) after leasing the capacity = %+v, want denied", d)
		}
		if err := ls.Return(ctx, key, lim, c, at); err != nil {
			t.Fatalf("Return(%q, %v, %d, %v): %v", key, lim, c, at, err)
		}
		if d := e.allow(key, lim, 0); d.Remaining != c {
			t.Errorf("peek after returning the lease = %+v, want Remaining %d", d, c)
		}

		// A partial return gives back only what is returned.
		_, at, err = ls.Lease(ctx, key, lim, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Return(ctx, key, lim, 1, at); err != nil {
			t.Fatal(err)
		}
		if d := e.allow(key, lim, 0); d.Remaining != c-1 {
			t.Errorf("peek after leasing 2 and returning 1 = %+v, want Remaining %d", d, c-1)
		}
		// Returning more than was leased never raises the limit.
		if err := ls.Return(ctx, key, lim, c, at); err != nil {
			t.Fatal(err)
		}
		if d := e.allow(key, lim, c); !d.Allowed || d.Remaining != 0 {
			t.Errorf("AllowN(%d) after an over-return = %+v, want allowed, Remaining 0", c, d)
		}
		if d := e.allow(key, lim, 1); d.Allowed {
			t.Errorf("AllowN(1) on a full key after an over-return = %+v, want denied", d)
		}
	})
}

// need skips t unless the store implements the optional interface T,
// named what.
func need[T any](t *testing.T, s *suite, what string) {
	t.Helper()
	if _, ok := s.probe(t).(T); !ok {
		t.Skipf("the store does not implement %s", what)
	}
}

// multiStore returns st as a sluice.MultiStore when it decides AllowMulti:
// a wrapper has the method whatever its shared store, and answers
// sluice.ErrMultiUnsupported (to an empty call too) when that cannot.
func multiStore(st sluice.Store) (sluice.MultiStore, bool) {
	ms, ok := st.(sluice.MultiStore)
	if !ok {
		return nil, false
	}
	_, err := ms.AllowMulti(context.Background(), nil)
	return ms, !errors.Is(err, sluice.ErrMultiUnsupported)
}

// needMulti skips t unless the store decides AllowMulti.
func (s *suite) needMulti(t *testing.T) {
	t.Helper()
	if _, ok := multiStore(s.probe(t)); !ok {
		t.Skip("the store does not decide AllowMulti (sluice.MultiStore)")
	}
}

// probe returns a store for type assertions.
func (s *suite) probe(t *testing.T) sluice.Store {
	if s.cfg.clocked != nil {
		return s.cfg.clocked(t, NewClock(epoch))
	}
	return s.newStore(t)
}

package sluicetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testReserve runs when the store can reserve (sluice.Reserver): a
// reservation counts like an admission, and returning it restores the
// key, never beyond an untouched one.
func (s *suite) testReserve(t *testing.T) {
	s.need(t, capReserve)
	ctx := context.Background()
	s.eachLongLimit(t, func(t *testing.T, e *env, lim sluice.Limit, key string) {
		ls := e.f
		c := lim.Capacity()

		before := e.clockNow()
		d, at, err := ls.Reserve(ctx, key, lim, c)
		after := e.clockNow()
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("Reserve(%q, %v, %d) = %+v, %v, want allowed, Remaining 0", key, lim, c, d, err)
		}
		checkDecision(t, d, lim, c)
		if at.Before(before.Add(-e.slack())) || at.After(after.Add(e.slack())) {
			t.Errorf("Reserve time %v, want within [%v, %v]", at, before, after)
		}
		if d := e.allow(key, lim, 1); d.Allowed {
			t.Errorf("AllowN(1) after reserving the capacity = %+v, want denied", d)
		}
		if err := ls.Return(ctx, key, lim, c, at); err != nil {
			t.Fatalf("Return(%q, %v, %d, %v): %v", key, lim, c, at, err)
		}
		if d := e.allow(key, lim, 0); d.Remaining != c {
			t.Errorf("peek after returning the reservation = %+v, want Remaining %d", d, c)
		}

		// A partial return gives back only what is returned.
		_, at, err = ls.Reserve(ctx, key, lim, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Return(ctx, key, lim, 1, at); err != nil {
			t.Fatal(err)
		}
		if d := e.allow(key, lim, 0); d.Remaining != c-1 {
			t.Errorf("peek after reserving 2 and returning 1 = %+v, want Remaining %d", d, c-1)
		}
		// Returning more than was reserved never raises the limit.
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

// capability is one of a sluice.FullStore's optional capabilities.
type capability int

const (
	capMulti capability = iota
	capReserve
	capReset
	capSemaphore
)

var capNames = [...]string{
	capMulti:     "AllowMulti (sluice.ErrMultiUnsupported)",
	capReserve:   "Reserve and Return (sluice.ErrReserveUnsupported)",
	capReset:     "Reset (sluice.ErrResetUnsupported)",
	capSemaphore: "concurrency limits (sluice.ErrSemaphoreUnsupported)",
}

// need skips t unless the store supports c: its method does not report
// the capability's sentinel.
func (s *suite) need(t *testing.T, c capability) {
	t.Helper()
	if !s.supports(t, c) {
		t.Skipf("the store does not support %s", capNames[c])
	}
}

// supports asks a fresh store (lifted: a store without the capability's
// method is one that lacks it) whether it has c, by a call that changes
// nothing: an AllowMulti of no request, a Reserve of 0 (a peek) and a Reset
// of a key never used, an Acquire released at once.
func (s *suite) supports(t *testing.T, c capability) bool {
	t.Helper()
	f := sluice.Lift(s.probe(t))
	ctx := context.Background()
	key := newKey(t)
	lim := sluice.PerSecond(1)
	var err, sentinel error
	switch c {
	case capMulti:
		_, err = f.AllowMulti(ctx, nil)
		sentinel = sluice.ErrMultiUnsupported
	case capReserve:
		_, _, err = f.Reserve(ctx, key, lim, 0)
		sentinel = sluice.ErrReserveUnsupported
	case capReset:
		err = f.Reset(ctx, key, lim)
		sentinel = sluice.ErrResetUnsupported
	case capSemaphore:
		_, err = f.Acquire(ctx, key, sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}, "probe")
		sentinel = sluice.ErrSemaphoreUnsupported
		if err == nil {
			f.Release(ctx, key, "probe")
		}
	}
	return !errors.Is(err, sentinel)
}

// probe returns a fresh store, to ask what it supports.
func (s *suite) probe(t *testing.T) sluice.Store {
	if s.cfg.clocked != nil {
		return s.cfg.clocked(t, NewClock(epoch))
	}
	return s.newStore(t)
}

package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/validate"
)

// Reserve implements sluice.Reserver: it admits n like AllowN and also
// returns the time at which the units were counted, which Return needs.
func (s *Store) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	var at int64
	d, err := s.allow(ctx, key, lim, n, &at)
	if err != nil {
		return d, time.Time{}, err
	}
	return d, time.UnixMicro(at), nil
}

// Lease is Reserve's former name.
//
// Deprecated: use Reserve.
func (s *Store) Lease(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	return s.Reserve(ctx, key, lim, n)
}

// Return implements sluice.Reserver: it gives back n units reserved at at.
// Afterwards the key is as if they had never been admitted, as far as
// they still count; returning more than was reserved never raises the limit
// beyond an untouched key. A state that no longer matters is removed.
//
// A zero at is the store's time now (a refund whose admission time is
// unknown): the units leave the current window, move a bucket's TAT back
// by their full worth, or remove a log's newest units, so a key in debt has its debt reduced and an
// untouched key stays untouched. n may be up to sluice.MaxCharge whatever
// the limit's Counting, since a refund never credits more than the key
// counts.
func (s *Store) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	p, err := s.check(ctx, key, lim, 0)
	if err == nil && (n < 0 || n > sluice.MaxCharge) {
		err = validate.Request(key, lim.WithCounting(sluice.CountAll), n)
	}
	if err != nil {
		return fmt.Errorf("memstore: return: %w", err)
	}
	if n == 0 {
		return nil
	}
	rf := s.ref(key, p)
	sh := rf.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookup(&rf)
	if i < 0 {
		return nil
	}
	e := &sh.slots[i]
	now := s.nowMicro()
	if e.expires <= now {
		sh.removeAt(i)
		return nil
	}
	us, nn := at.UnixMicro(), int64(n)
	if at.IsZero() {
		us = now
		if p.Kind == algo.FixedWindow || p.Kind == algo.SlidingWindow {
			us = max(now, e.a) // the time a decision would use: never before the window's start
		}
	}
	switch p.Kind {
	case algo.FixedWindow:
		w := algo.FixedWindowReturn(algo.Window{Start: e.a, Count: e.b}, us, *p, nn)
		e.a, e.b = w.Start, w.Count
	case algo.SlidingWindow:
		c := algo.SlidingWindowReturn(algo.Counter{Start: e.a, Prev: e.b, Cur: e.c}, us, *p, nn)
		e.a, e.b, e.c = c.Start, c.Prev, c.Cur
	case algo.TokenBucket, algo.GCRA: // a token bucket is kept as a TAT (algo.Bucket)
		t := algo.GCRAReturn(algo.TAT{At: e.a, Frac: e.b}, us, now, *p, nn)
		e.a, e.b = t.At, t.Frac
	case algo.SlidingLog:
		if l := sh.log(e); l != nil && at.IsZero() {
			algo.SlidingLogReturnNewest(l, now, *p, nn)
		} else if l != nil {
			algo.SlidingLogReturn(l, us, now, *p, nn)
		}
	}
	e.expires = sh.expiry(e, p)
	sh.noteExpiry(e.expires)
	if e.expires <= now {
		sh.removeAt(i)
	}
	return nil
}

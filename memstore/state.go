package memstore

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// stepHook, when set (by tests, in export_test.go), runs before every
// algorithm step, under the shard's lock: a test makes it panic to hold
// the store to its panic safety.
var stepHook func()

// kind is the algorithm of e, kept in the low bits of its hash.
func (e *entry) kind() algo.Kind { return algo.Kind(e.h & kindMask) }

// reset empties e's state, keeping a log's buffer.
func (sh *shard) reset(e *entry) {
	if e.kind() == algo.SlidingLog {
		if l := sh.log(e); l != nil {
			l.Reset()
		}
		return
	}
	e.a, e.b, e.c = 0, 0, 0
}

// step applies one algorithm step to e; with commit false nothing changes
// but the dropping of expired log entries. e need not be held by sh (a
// fresh state on the stack) unless it is a log.
func (sh *shard) step(e *entry, now int64, p *algo.Params, n int64, commit bool) algo.Result {
	if stepHook != nil {
		stepHook()
	}
	var r algo.Result
	switch p.Kind {
	case algo.FixedWindow:
		var w algo.Window
		if p.Charge {
			w, r = algo.FixedWindowCharge(algo.Window{Start: e.a, Count: e.b}, now, *p, n)
		} else {
			w, r = algo.FixedWindowStep(algo.Window{Start: e.a, Count: e.b}, now, *p, n)
		}
		if commit {
			e.a, e.b = w.Start, w.Count
		}
	case algo.SlidingWindow:
		var c algo.Counter
		if p.Charge {
			c, r = algo.SlidingWindowCharge(algo.Counter{Start: e.a, Prev: e.b, Cur: e.c}, now, *p, n)
		} else {
			c, r = algo.SlidingWindowStep(algo.Counter{Start: e.a, Prev: e.b, Cur: e.c}, now, *p, n)
		}
		if commit {
			e.a, e.b, e.c = c.Start, c.Prev, c.Cur
		}
	case algo.TokenBucket, algo.GCRA: // a token bucket is kept as a TAT (algo.Bucket)
		var t algo.TAT
		if p.Charge {
			t, r = algo.GCRACharge(algo.TAT{At: e.a, Frac: e.b}, now, *p, n)
		} else {
			t, r = algo.GCRAStep(algo.TAT{At: e.a, Frac: e.b}, now, *p, n)
		}
		if commit {
			e.a, e.b = t.At, t.Frac
		}
	case algo.SlidingLog:
		l := sh.log(e)
		if l == nil {
			if !commit || n == 0 {
				var empty algo.Log
				return algo.SlidingLogStep(&empty, now, *p, n, false)
			}
			l = sh.attachLog(e)
		}
		r = algo.SlidingLogStep(l, now, *p, n, commit)
	}
	if commit && counted(p, r, n) {
		e.expires = sh.expiry(e, p)
	}
	return r
}

// counted reports whether a step of n that decided r changed the state: an
// admission of n > 0, or any charge of n > 0 by a limit that counts every
// hit.
func counted(p *algo.Params, r algo.Result, n int64) bool {
	return n > 0 && (r.Allowed || p.Charge)
}

// stamp returns the time (µs) at which the admission just made on e was
// counted: now, unless the algorithm clamped a clock that ran backwards to
// the state's own time.
func (sh *shard) stamp(e *entry, now int64, p *algo.Params) int64 {
	switch p.Kind {
	case algo.FixedWindow, algo.SlidingWindow:
		return max(now, e.a) // the window start
	case algo.SlidingLog:
		return sh.log(e).Newest()
	}
	return now
}

// expiry returns the time (µs) at and after which e's state no longer
// matters, computed from the state itself rather than from the time of the
// call: an algorithm clamps a clock that ran backwards to the state's own
// time, so now + ResetAfter could end the state too early.
func (sh *shard) expiry(e *entry, p *algo.Params) int64 {
	switch p.Kind {
	case algo.FixedWindow:
		if e.b > 0 {
			return e.a + p.Period // window start + P
		}
	case algo.SlidingWindow:
		switch {
		case e.c > 0:
			return e.a + 2*p.Period // the current count weighs until the next window ends
		case e.b > 0:
			return e.a + p.Period
		}
	case algo.TokenBucket, algo.GCRA:
		if e.b > 0 {
			return e.a + 1 // TAT + Frac/R, Frac > 0
		}
		return e.a
	case algo.SlidingLog:
		if l := sh.log(e); l != nil && l.Units() > 0 {
			return l.Newest() + p.Period
		}
	}
	return 0
}

func decision(l sluice.Limit, r algo.Result) sluice.Decision {
	return sluice.Decision{
		Allowed:    r.Allowed,
		Limit:      sluice.Limit{Algorithm: l.Algorithm, Rate: l.Rate, Period: l.Period, Burst: l.Burst, Counting: l.Counting},
		Remaining:  int(r.Remaining),
		RetryAfter: time.Duration(r.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(r.ResetAfter) * time.Microsecond,
	}
}

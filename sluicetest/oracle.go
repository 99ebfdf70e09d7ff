package sluicetest

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// oracle is an exact model of one state, used where a store is allowed to
// differ from the tables (MayDenyEarly): it replays what the store admitted.
type oracle struct {
	p algo.Params
	w algo.Window
	c algo.Counter
	b algo.Bucket
	g algo.TAT
	l algo.Log
}

func newOracle(l sluice.Limit) *oracle {
	return &oracle{p: algo.NewParams(algo.Kind(l.Algorithm), int64(l.Rate), int64(l.Burst), l.Period.Microseconds())}
}

// step decides n at now (µs since the epoch) and, when commit is true and it
// is admitted, counts it.
func (o *oracle) step(now time.Time, n int, commit bool) algo.Result {
	us, nn := now.UnixMicro(), int64(n)
	switch o.p.Kind {
	case algo.FixedWindow:
		return apply(&o.w, algo.FixedWindowStep, us, o.p, nn, commit)
	case algo.SlidingWindow:
		return apply(&o.c, algo.SlidingWindowStep, us, o.p, nn, commit)
	case algo.TokenBucket:
		return apply(&o.b, algo.TokenBucketStep, us, o.p, nn, commit)
	case algo.GCRA:
		return apply(&o.g, algo.GCRAStep, us, o.p, nn, commit)
	case algo.SlidingLog:
		return algo.SlidingLogStep(&o.l, us, o.p, nn, commit)
	}
	return algo.Result{}
}

// apply runs one algorithm step on *st and keeps its new state when commit
// is true (a denial's state is the old one).
func apply[S any](st *S, step func(S, int64, algo.Params, int64) (S, algo.Result), now int64, p algo.Params, n int64, commit bool) algo.Result {
	next, r := step(*st, now, p, n)
	if commit {
		*st = next
	}
	return r
}

func (o *oracle) decision(l sluice.Limit, r algo.Result) sluice.Decision {
	return sluice.Decision{
		Allowed:    r.Allowed,
		Limit:      l,
		Remaining:  int(r.Remaining),
		RetryAfter: time.Duration(r.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(r.ResetAfter) * time.Microsecond,
	}
}

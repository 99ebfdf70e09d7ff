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
	var r algo.Result
	switch o.p.Kind {
	case algo.FixedWindow:
		var w algo.Window
		w, r = algo.FixedWindowStep(o.w, us, o.p, nn)
		if commit {
			o.w = w
		}
	case algo.SlidingWindow:
		var c algo.Counter
		c, r = algo.SlidingWindowStep(o.c, us, o.p, nn)
		if commit {
			o.c = c
		}
	case algo.TokenBucket:
		var b algo.Bucket
		b, r = algo.TokenBucketStep(o.b, us, o.p, nn)
		if commit {
			o.b = b
		}
	case algo.GCRA:
		var g algo.TAT
		g, r = algo.GCRAStep(o.g, us, o.p, nn)
		if commit {
			o.g = g
		}
	case algo.SlidingLog:
		r = algo.SlidingLogStep(&o.l, us, o.p, nn, commit)
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

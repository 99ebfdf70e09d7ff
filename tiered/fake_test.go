package tiered_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/validate"
	"github.com/sluicehq/sluice/tiered"
)

// exact is a minimal exact sluice.Reserver on a clock, built on internal/algo
// (the math every store shares), that counts its calls and can fail.
type exact struct {
	now func() time.Time

	mu     sync.Mutex
	states map[exactKey]*exactState

	calls, leases, returns atomic.Int64
	admitted               atomic.Int64 // units admitted (AllowN and Lease)
	fail                   atomic.Bool
}

type exactKey struct {
	key    string
	kind   algo.Kind
	period int64
}

type exactState struct {
	w   algo.Window
	c   algo.Counter
	b   algo.Bucket
	t   algo.TAT
	log algo.Log
}

var errDown = errors.New("fake: connection refused")

func newExact(now func() time.Time) *exact {
	return &exact{now: now, states: make(map[exactKey]*exactState)}
}

var _ sluice.Reserver = (*exact)(nil)

func params(l sluice.Limit) algo.Params {
	return algo.NewParams(algo.Kind(l.Algorithm), int64(l.Rate), int64(l.Burst), l.Period.Microseconds())
}

func (x *exact) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	d, _, err := x.Reserve(ctx, key, lim, n)
	x.leases.Add(-1)
	return d, err
}

func (x *exact) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	x.calls.Add(1)
	x.leases.Add(1)
	if x.fail.Load() {
		return sluice.Decision{}, time.Time{}, errDown
	}
	if err := validate.Request(key, lim, n); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	p := params(lim)
	x.mu.Lock()
	defer x.mu.Unlock()
	at := x.now()
	now := at.UnixMicro()
	k := exactKey{key, p.Kind, p.Period}
	st := x.states[k]
	if st == nil {
		st = new(exactState)
		x.states[k] = st
	}
	var r algo.Result
	if lim.Counting == sluice.CountAll {
		switch p.Kind {
		case algo.FixedWindow:
			st.w, r = algo.FixedWindowCharge(st.w, now, p, int64(n))
		case algo.SlidingWindow:
			st.c, r = algo.SlidingWindowCharge(st.c, now, p, int64(n))
		case algo.TokenBucket:
			st.b, r = algo.TokenBucketCharge(st.b, now, p, int64(n))
		case algo.GCRA:
			st.t, r = algo.GCRACharge(st.t, now, p, int64(n))
		}
		x.admitted.Add(int64(n))
	} else {
		r = x.step(st, now, p, n)
	}
	if r.Allowed && lim.Counting != sluice.CountAll {
		x.admitted.Add(int64(n))
	}
	return sluice.Decision{
		Allowed:    r.Allowed,
		Limit:      lim,
		Remaining:  int(r.Remaining),
		RetryAfter: time.Duration(r.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(r.ResetAfter) * time.Microsecond,
	}, at, nil
}

// step is one step of a limit that counts admitted hits.
func (x *exact) step(st *exactState, now int64, p algo.Params, n int) algo.Result {
	var r algo.Result
	switch p.Kind {
	case algo.FixedWindow:
		st.w, r = algo.FixedWindowStep(st.w, now, p, int64(n))
	case algo.SlidingWindow:
		st.c, r = algo.SlidingWindowStep(st.c, now, p, int64(n))
	case algo.TokenBucket:
		st.b, r = algo.TokenBucketStep(st.b, now, p, int64(n))
	case algo.GCRA:
		st.t, r = algo.GCRAStep(st.t, now, p, int64(n))
	case algo.SlidingLog:
		r = algo.SlidingLogStep(&st.log, now, p, int64(n), true)
	}
	return r
}

func (x *exact) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	x.calls.Add(1)
	x.returns.Add(1)
	if x.fail.Load() {
		return errDown
	}
	p := params(lim)
	x.mu.Lock()
	defer x.mu.Unlock()
	st := x.states[exactKey{key, p.Kind, p.Period}]
	if st == nil {
		return nil
	}
	a := at.UnixMicro()
	if at.IsZero() { // the store's now, never before a window's start
		a = x.now().UnixMicro()
		switch p.Kind {
		case algo.FixedWindow:
			a = max(a, st.w.Start)
		case algo.SlidingWindow:
			a = max(a, st.c.Start)
		case algo.SlidingLog:
			algo.SlidingLogReturnNewest(&st.log, a, p, int64(n))
			return nil
		}
	}
	switch p.Kind {
	case algo.FixedWindow:
		st.w = algo.FixedWindowReturn(st.w, a, p, int64(n))
	case algo.SlidingWindow:
		st.c = algo.SlidingWindowReturn(st.c, a, p, int64(n))
	case algo.TokenBucket:
		st.b = algo.TokenBucketReturn(st.b, a, x.now().UnixMicro(), p, int64(n))
	case algo.GCRA:
		st.t = algo.GCRAReturn(st.t, a, x.now().UnixMicro(), p, int64(n))
	case algo.SlidingLog:
		algo.SlidingLogReturn(&st.log, a, x.now().UnixMicro(), p, int64(n))
	}
	x.admitted.Add(-int64(n))
	return nil
}

// newTiered returns tiered.New's store; the test closes it.
func newTiered(t testing.TB, shared sluice.Store, opts ...tiered.Option) *tiered.Store {
	t.Helper()
	s, err := tiered.New(shared, opts...)
	if err != nil {
		t.Fatalf("tiered.New: %v", err)
	}
	return s
}

// hold stops one call of a store wrapper until the test lets it go on:
// entered is closed when the call arrives, and it goes on once release is
// closed. The wrappers of the race tests embed it.
type hold struct {
	entered chan struct{}
	release chan struct{}
}

func newHold() hold { return hold{entered: make(chan struct{}), release: make(chan struct{})} }

// wait is the held call's side: it signals its arrival and waits.
func (h hold) wait() {
	close(h.entered)
	<-h.release
}

package sluicetest_test

import (
	"context"
	"time"

	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// refusing is memstore that refuses sliding logs, as a store that decides
// only some algorithms must: after validating the request, with a
// *sluice.LimitError on Algorithm.
type refusing struct{ *memstore.Store }

func refuse(lim sluice.Limit) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	if lim.Algorithm == sluice.SlidingLog {
		return &sluice.LimitError{Field: "Algorithm", Reason: "sliding_log is not decided here"}
	}
	return nil
}

func (r refusing) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if err := refuse(lim); err != nil {
		return sluice.Decision{}, err
	}
	return r.Store.AllowN(ctx, key, lim, n)
}

func (r refusing) Lease(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	if err := refuse(lim); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	return r.Store.Lease(ctx, key, lim, n)
}

func (r refusing) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	if err := refuse(lim); err != nil {
		return err
	}
	return r.Store.Return(ctx, key, lim, n, at)
}

func (r refusing) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	if err := refuse(lim); err != nil {
		return err
	}
	return r.Store.Reset(ctx, key, lim)
}

// TestWithAlgorithms runs the suite on a store that decides four of the
// five algorithms and refuses the fifth.
func TestWithAlgorithms(t *testing.T) {
	newStore := func(t *testing.T, opts ...memstore.Option) sluice.Store {
		s := memstore.New(opts...)
		t.Cleanup(func() { s.Close() })
		return refusing{s}
	}
	sluicetest.Run(t, func(t *testing.T) sluice.Store { return newStore(t) },
		sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
			return newStore(t, memstore.WithClock(c.Now))
		}),
		sluicetest.WithAlgorithms(sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA))
}

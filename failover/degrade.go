package failover

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

// modeOf is lim's failure mode: its own, or the store's default.
func (s *Store) modeOf(lim sluice.Limit) sluice.FailureMode {
	if lim.FailureMode != sluice.FailDefault {
		return lim.FailureMode
	}
	return s.cfg.mode
}

// degrade decides without the shared store, by lim's failure mode. The
// caller has checked the request as the shared store would have. Under
// sluice.FailError it decides nothing: the error wraps sluice.ErrNoDecision
// and cause.
func (s *Store) degrade(ctx context.Context, key string, lim sluice.Limit, n int, cause error) (sluice.Decision, error) {
	m := s.modeOf(lim)
	var d sluice.Decision
	switch {
	case m == sluice.FailError:
		return sluice.Decision{}, s.undecided(ctx, key, lim, cause)
	case m == sluice.FailUncounted:
		d = s.uncounted(ctx, []sluice.Request{{Key: key, Limit: lim, N: n}})[0]
	case n == 0 && lim.Counting != sluice.CountAll:
		// A peek admits nothing: allowed in every mode, Remaining 0
		// (unknown). A cost of 0 of a limit that counts every hit is a
		// check of its debt, decided by the mode like any cost.
		d = sluice.Decision{Allowed: true, Limit: lim, Degraded: true}
	case m == sluice.FailOpenUnbounded:
		d = sluice.Decision{Allowed: true, Limit: lim, Degraded: true}
	case m == sluice.FailOpen && s.cfg.replicas == 0:
		cause = ErrNoReplicas
		d = s.denial(lim)
	case m == sluice.FailOpen:
		d = s.localDecide(ctx, key, lim, n)
	default:
		d = s.denial(lim)
	}
	s.account(ctx, key, lim, m, d.Allowed, cause)
	return d, nil
}

// undecided is FailError's answer: no decision, an error wrapping
// sluice.ErrNoDecision and cause, reported to the Observer as a Degraded
// call of mode FailError that admitted nothing.
func (s *Store) undecided(ctx context.Context, key string, lim sluice.Limit, cause error) error {
	s.undecidedCalls.Add(1)
	s.cfg.obs.Degraded(key, lim, sluice.FailError, false, cause)
	if s.cfg.log.Enabled(ctx, slog.LevelDebug) {
		s.cfg.log.DebugContext(ctx, "failover: no decision (failure mode error)", "key", key, "limit", lim, "cause", cause)
	}
	return fmt.Errorf("%w: %w", sluice.ErrNoDecision, cause)
}

// checkMulti checks an AllowMulti call as the shared store would have.
func checkMulti(reqs []sluice.Request) error {
	for i, rq := range reqs {
		if err := validate.Request(rq.Key, rq.Limit, rq.N); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
	}
	return validate.Multi(reqs)
}

// degradeMulti decides an AllowMulti call without the shared store, all or
// nothing, by the strictest failure mode of its requests (under
// sluice.FailError, none: an error, reported once, for the first request).
func (s *Store) degradeMulti(ctx context.Context, reqs []sluice.Request, cause error) ([]sluice.Decision, error) {
	if err := checkMulti(reqs); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	m := sluice.FailDefault
	for _, rq := range reqs {
		m = m.Stricter(rq.Limit.FailureMode)
	}
	if m == sluice.FailDefault {
		m = s.cfg.mode
	}
	var ds []sluice.Decision
	switch {
	case m == sluice.FailError:
		return nil, s.undecided(ctx, reqs[0].Key, reqs[0].Limit, cause)
	case m == sluice.FailUncounted:
		ds = s.uncounted(ctx, reqs)
	case m == sluice.FailOpenUnbounded:
		ds = make([]sluice.Decision, len(reqs))
		for i, rq := range reqs {
			ds[i] = sluice.Decision{Allowed: true, Limit: rq.Limit, Degraded: true}
		}
	case m == sluice.FailOpen && s.cfg.replicas == 0:
		cause = ErrNoReplicas
	case m == sluice.FailOpen:
		ds = s.localMulti(ctx, reqs)
	}
	if ds == nil {
		ds = make([]sluice.Decision, len(reqs))
		for i, rq := range reqs {
			ds[i] = s.denial(rq.Limit)
		}
	}
	for _, rq := range reqs {
		s.account(ctx, rq.Key, rq.Limit, m, ds[0].Allowed, cause)
	}
	return ds, nil
}

// uncounted is FailUncounted's answer: reqs decided as if nothing had been
// counted for their keys (memstore's Untouched), counting nothing; the
// denials of FailClosed if it cannot (reqs were checked as the shared store
// would have checked them, so only a cancelled ctx).
func (s *Store) uncounted(ctx context.Context, reqs []sluice.Request) []sluice.Decision {
	ds, err := s.local.Untouched(ctx, reqs)
	if err != nil {
		ds = make([]sluice.Decision, len(reqs))
		for i, rq := range reqs {
			ds[i] = s.denial(rq.Limit)
		}
		return ds
	}
	for i := range ds {
		ds[i].Limit = reqs[i].Limit
		ds[i].Degraded = true
	}
	return ds
}

// localMulti decides reqs through the strict local limiter, or returns nil
// when it cannot (a share too small for a request's cost).
func (s *Store) localMulti(ctx context.Context, reqs []sluice.Request) []sluice.Decision {
	local := make([]sluice.Request, len(reqs))
	for i, rq := range reqs {
		l, ok := LocalLimit(rq.Limit, s.cfg.replicas)
		if !ok || rq.N > l.Capacity() && l.Counting != sluice.CountAll {
			return nil
		}
		local[i] = sluice.Request{Key: rq.Key, Limit: l, N: rq.N}
	}
	ds, err := s.local.AllowMulti(ctx, local)
	if err != nil {
		return nil
	}
	for i := range ds {
		ds[i].Limit = reqs[i].Limit
		ds[i].Degraded = true
	}
	return ds
}

func (s *Store) account(ctx context.Context, key string, lim sluice.Limit, m sluice.FailureMode, allowed bool, cause error) {
	if allowed {
		s.degradedAllowed.Add(1)
	} else {
		s.degradedDenied.Add(1)
	}
	s.cfg.obs.Degraded(key, lim, m, allowed, cause)
	if s.cfg.log.Enabled(ctx, slog.LevelDebug) {
		s.cfg.log.DebugContext(ctx, "failover: degraded decision", "key", key, "limit", lim, "mode", m, "allowed", allowed, "cause", cause)
	}
}

// denial is a FailClosed decision: RetryAfter is a hint of when the
// breaker may be closed again.
func (s *Store) denial(lim sluice.Limit) sluice.Decision {
	return sluice.Decision{Limit: lim, RetryAfter: s.cfg.probeInterval, Degraded: true}
}

// localDecide admits through the strict local limiter, which counts every
// hit of a limit that does (sluice.CountAll), as memstore does: a charge
// above the local share's capacity is recorded there and denied.
func (s *Store) localDecide(ctx context.Context, key string, lim sluice.Limit, n int) sluice.Decision {
	l, ok := LocalLimit(lim, s.cfg.replicas)
	if !ok || n > l.Capacity() && l.Counting != sluice.CountAll {
		return s.denial(lim)
	}
	d, err := s.local.AllowN(ctx, key, l, n)
	if err != nil {
		return s.denial(lim)
	}
	d.Limit = lim
	d.Degraded = true
	return d
}

// LocalLimit returns the share of lim that one of replicas processes admits
// under FailOpen: Rate/replicas per Period, rounded down, or 1 per
// ceil(replicas/Rate) Periods when Rate < replicas; Burst scaled the same,
// at least 1. It reports false when replicas < 1 or the share is not a
// valid limit.
func LocalLimit(lim sluice.Limit, replicas int) (sluice.Limit, bool) {
	if replicas < 1 || lim.Rate < 1 {
		return lim, false
	}
	l := lim
	if lim.Rate >= replicas {
		l.Rate = lim.Rate / replicas
	} else {
		m := (replicas + lim.Rate - 1) / lim.Rate
		if lim.Period > time.Duration(1<<62)/time.Duration(m) {
			return lim, false
		}
		l.Rate, l.Period = 1, lim.Period*time.Duration(m)
	}
	if lim.Burst > 0 {
		l.Burst = max(lim.Burst/replicas, 1)
	}
	return l, l.Validate() == nil
}

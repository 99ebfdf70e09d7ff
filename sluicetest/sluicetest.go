// Package sluicetest is the conformance suite that every sluice.Store in
// this project passes, with the same numbers: memstore, redisstore (single
// node and Cluster, with either client), failover and tiered.
//
// A store's test calls Run with a constructor that returns a fresh store;
// each subtest gets its own store and a random key:
//
//	func TestConformance(t *testing.T) {
//		sluicetest.Run(t, func(t *testing.T) sluice.Store {
//			s := memstore.New()
//			t.Cleanup(func() { s.Close() })
//			return s
//		}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
//			s := memstore.New(memstore.WithClock(c.Now))
//			t.Cleanup(func() { s.Close() })
//			return s
//		}))
//	}
//
// With WithClock, every case runs on an injected fake Clock and every
// Decision is checked to the microsecond (Remaining, RetryAfter,
// ResetAfter). Without it, the store runs on real time (Redis takes time
// from TIME): the same step tables run with their periods scaled down to
// 20 × the tolerance (WithTolerance, default 10ms, so periods of 200ms),
// the suite sleeps until each step's time, and durations are checked to
// within the tolerance; Allowed and Remaining are still exact.
//
// What the suite holds every store to, beyond the step tables: waiting
// RetryAfter admits and 1µs less does not; n = 0 is a peek; n > Capacity
// is sluice.ErrExceedsCapacity, a negative n ErrInvalidCost; every invalid
// Limit field is ErrInvalidLimit naming the field; empty keys and keys over
// sluice.MaxKeyLen are ErrInvalidKey; each of these errors is a
// *sluice.LimitError whose Field names the culprit ("Rate", "Key", "N"…),
// also inside AllowMulti; keys are opaque bytes (braces,
// colons, NUL, invalid UTF-8) with states of their own; a denial counts
// nothing; state is per (key, algorithm, period) and a Rate change keeps the
// count; a cancelled or expired context is an error that counts nothing;
// many goroutines on one key never break the limit: every admission's time
// is bracketed by clock reads around the call, and what the brackets prove
// is checked (SlidingLog: no interval of length Period holds more than
// Rate; TokenBucket and GCRA: at most Burst + Rate·t/Period in any interval
// t; FixedWindow and SlidingWindow: at most Rate per epoch-aligned window).
// AllowMulti is all-or-nothing, requests on one state are decided one after
// the other, and costs on one state whose sum exceeds its capacity are
// ErrExceedsCapacity (no wait could admit them). Reserve and Return restore
// a key exactly, never beyond untouched. Reset puts a key back to untouched
// under one limit's algorithm and period (its debt too), and no other
// state of the key.
//
// A limit that counts every hit (sluice.CountAll) records a charge over
// what is left and one over its capacity (which it denies), denies a cost
// of 0 while in debt, and admits again when time has repaid the debt, per
// algorithm (the step tables); inside AllowMulti it is charged whatever
// the call decides. A Return with a zero time refunds at the store's now,
// reducing a debt, never crediting an untouched key.
//
// A store with concurrency limits runs the SemaphoreCases too (at most Max
// held, TTLs that end exactly, renewals that count once, ErrPermitLost,
// bounds checked before any state).
//
// Documented differences of wrappers are declared, never skipped:
// MayDenyEarly for a store that may deny where an exact store admits (a
// tiered store holding leases); FixedWindowsApart for a store that keeps
// each fixed window as a state of its own; WithAlgorithms for a store
// that decides only some algorithms (memcachestore), whose cases then run
// for those, and which must refuse every other with a *sluice.LimitError
// on "Algorithm" wrapping sluice.ErrInvalidLimit. The cases of a
// capability run when the store supports it: the store is lifted
// (sluice.Lift), asked once by a call that changes nothing, and the cases
// are skipped when the answer wraps the capability's sentinel
// (sluice.ErrMultiUnsupported for the AllowMulti cases,
// ErrReserveUnsupported for Reserve and RefundNow, ErrResetUnsupported for
// Reset, ErrSemaphoreUnsupported for Semaphore): a store that embeds
// sluice.Unsupported and implements a capability's methods is held to that
// capability's contract.
package sluicetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Option configures Run. Run fails the test at once on an option given an
// invalid value.
type Option func(*config)

type config struct {
	clocked   func(t *testing.T, c *Clock) sluice.Store
	tol       time.Duration
	denyEarly bool
	// windowsApart is FixedWindowsApart's declaration.
	windowsApart bool
	algs         []sluice.Algorithm // WithAlgorithms; nil: every algorithm
	err          error              // the first invalid option
}

func (cfg *config) invalid(format string, args ...any) {
	if cfg.err == nil {
		cfg.err = fmt.Errorf("sluicetest: "+format, args...)
	}
}

// WithClock gives Run a constructor for a store that reads the fake Clock
// c. Every case then runs on that store and checks decisions exactly; the
// constructor given to Run itself is used once more, for a short smoke test
// on real time.
func WithClock(newStore func(t *testing.T, c *Clock) sluice.Store) Option {
	return func(cfg *config) {
		if newStore == nil {
			cfg.invalid("WithClock(nil)")
			return
		}
		cfg.clocked = newStore
	}
}

// DefaultTolerance is the tolerance of stores on real time.
const DefaultTolerance = 10 * time.Millisecond

// WithTolerance sets how far a duration of a store on real time may be
// from the exact one (default DefaultTolerance). The step tables then use
// periods of 20 × d: a larger tolerance makes the suite slower, not laxer.
// It has no effect on cases that run on a fake Clock. d must be at least
// a microsecond.
func WithTolerance(d time.Duration) Option {
	return func(cfg *config) {
		if d < time.Microsecond {
			cfg.invalid("WithTolerance(%v): want at least 1µs", d)
			return
		}
		cfg.tol = d.Round(time.Microsecond)
	}
}

// MayDenyEarly declares a store that may deny a request that an exact store
// would admit, and report a smaller Remaining, as a tiered store holding
// leases does. The suite then holds it to never admit what an exact store,
// given the same admitted history, would deny; concurrency invariants are
// checked unchanged.
func MayDenyEarly() Option { return func(cfg *config) { cfg.denyEarly = true } }

// FixedWindowsApart declares a store that keeps each fixed window as a
// state of its own, named by the window (memcachestore, as
// envoyproxy/ratelimit does), rather than one state per key that holds
// the newest window it has seen: a clock that runs back into an earlier
// window counts in that window's state, instead of being held at the
// newest window, and the later window keeps its count. The suite then runs
// a table of its own for a clock running backwards on a fixed window; the
// limit per window holds all the same.
func FixedWindowsApart() Option { return func(cfg *config) { cfg.windowsApart = true } }

// WithAlgorithms declares the algorithms a store decides (by default every
// one). The cases run for those only, and the case Unsupported checks that
// the store refuses each of the others, before counting anything, with a
// *sluice.LimitError on "Algorithm" wrapping sluice.ErrInvalidLimit (a
// Limit no wait could make decidable). A store that decides only some
// algorithms must say which in its documentation, and why.
func WithAlgorithms(as ...sluice.Algorithm) Option {
	return func(cfg *config) {
		if len(as) == 0 {
			cfg.invalid("WithAlgorithms(): want at least one algorithm")
			return
		}
		for _, a := range as {
			if !slices.Contains(algorithms, a) {
				cfg.invalid("WithAlgorithms: unknown algorithm %v", a)
				return
			}
		}
		cfg.algs = slices.Clone(as)
	}
}

// decides reports whether the store decides algorithm a.
func (cfg *config) decides(a sluice.Algorithm) bool {
	return cfg.algs == nil || slices.Contains(cfg.algs, a)
}

// only returns the algorithms of as that the store decides, in order.
func (cfg *config) only(as []sluice.Algorithm) []sluice.Algorithm {
	var out []sluice.Algorithm
	for _, a := range as {
		if cfg.decides(a) {
			out = append(out, a)
		}
	}
	return out
}

// Epoch returns the fake Clock's start in every case: midnight UTC,
// aligned to every period that divides a day, so fixed windows start with
// the case. Start a Clock of your own tests there to reuse the suite's
// numbers.
func Epoch() time.Time { return epoch }

var epoch = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

// Run runs the conformance suite against the stores newStore returns, one
// fresh store per subtest (see the package documentation for options).
func Run(t *testing.T, newStore func(t *testing.T) sluice.Store, opts ...Option) {
	t.Helper()
	cfg := &config{tol: DefaultTolerance}
	for _, o := range opts {
		o(cfg)
	}
	switch {
	case cfg.err != nil:
		t.Fatal(cfg.err)
	case newStore == nil && cfg.clocked == nil:
		t.Fatal("sluicetest: Run: no store: newStore is nil and WithClock is not given")
	}
	s := &suite{cfg: cfg, newStore: newStore}
	cases := []struct {
		name string
		run  func(*testing.T)
	}{
		{"Steps", s.testSteps},
		{"RetryAfterExact", s.testRetryAfterExact},
		{"Peek", s.testPeek},
		{"ExceedsCapacity", s.testExceedsCapacity},
		{"InvalidLimit", s.testInvalidLimit},
		{"InvalidKey", s.testInvalidKey},
		{"KeyBytes", s.testKeyBytes},
		{"DeniedNotCounted", s.testDeniedNotCounted},
		{"StateIdentity", s.testStateIdentity},
		{"CancelledContext", s.testCancelledContext},
		{"Concurrent", s.testConcurrent},
		{"Multi", s.testMulti},
		{"Reserve", s.testReserve},
		{"CountAll", s.testCountAll},
		{"CountAllMulti", s.testCountAllMulti},
		{"PeekCountAll", s.testPeekCountAll},
		{"RefundNow", s.testRefundNow},
		{"Reset", s.testReset},
		{"Semaphore", s.testSemaphore},
		{"Unsupported", s.testUnsupported},
	}
	for _, c := range cases {
		t.Run(c.name, c.run)
	}
	if cfg.clocked != nil && newStore != nil {
		t.Run("RealClock", s.testRealClock)
	}
}

type suite struct {
	cfg      *config
	newStore func(t *testing.T) sluice.Store
}

// group runs subtests in turn on a fake clock, and all at once on real
// time, where they mostly sleep: calling t.Run from several goroutines runs
// them together whatever -parallel allows.
type group struct {
	t      *testing.T
	concur bool
	wg     sync.WaitGroup
}

func (s *suite) group(t *testing.T) *group {
	return &group{t: t, concur: s.cfg.clocked == nil}
}

func (g *group) run(name string, f func(t *testing.T)) {
	if !g.concur {
		g.t.Run(name, f)
		return
	}
	g.wg.Go(func() { g.t.Run(name, f) })
}

// wait returns when every subtest has.
func (g *group) wait() { g.wg.Wait() }

// env is one subtest's store, key and time.
type env struct {
	t     *testing.T
	cfg   *config
	s     sluice.Store
	f     sluice.FullStore // s, lifted
	c     *Clock           // nil on real time
	start time.Time        // the time of offset 0
	unit  time.Duration
}

// env returns a fresh store for t; on real time, time offset 0 is the next
// multiple of align (scaled), so that fixed windows start with the case.
func (s *suite) env(t *testing.T, align time.Duration) *env {
	t.Helper()
	e := &env{t: t, cfg: s.cfg, unit: time.Second}
	if s.cfg.clocked != nil {
		e.c = NewClock(epoch)
		e.start = epoch
		e.s = s.cfg.clocked(t, e.c)
		e.f = sluice.Lift(e.s)
		return e
	}
	e.s = s.newStore(t)
	e.f = sluice.Lift(e.s)
	e.unit = 20 * s.cfg.tol
	if align > 0 {
		// The next multiple of a since the Unix epoch (fixed windows are
		// epoch-aligned; time.Truncate counts from year 1).
		a := e.scale(align).Microseconds()
		now := time.Now()
		next := (now.UnixMicro()/a + 1) * a
		if time.UnixMicro(next).Sub(now) < 2*s.cfg.tol {
			next += a
		}
		e.start = time.UnixMicro(next)
		time.Sleep(time.Until(e.start))
	} else {
		e.start = time.Now()
	}
	return e
}

func (e *env) exact() bool { return e.c != nil }

// scale converts a duration of the tables (written for periods of seconds)
// to the store's: unchanged on a fake clock, else scaled so that 1s is 20 ×
// the tolerance, rounded to the microsecond.
func (e *env) scale(d time.Duration) time.Duration {
	if e.c != nil {
		return d
	}
	return time.Duration(int64(d) / int64(time.Microsecond) * int64(e.unit) / int64(time.Second) * int64(time.Microsecond))
}

func (e *env) lim(l sluice.Limit) sluice.Limit {
	l.Period = e.scale(l.Period)
	return l
}

// at moves to offset d (of the tables) since the start.
func (e *env) at(d time.Duration) {
	if e.c != nil {
		e.c.Set(e.start.Add(d))
		return
	}
	time.Sleep(time.Until(e.start.Add(e.scale(d))))
}

// now is the current offset since the start, in the store's durations.
func (e *env) now() time.Duration {
	if e.c != nil {
		return e.c.Now().Sub(e.start)
	}
	return time.Since(e.start)
}

// sleep lets d of the store's time pass.
func (e *env) sleep(d time.Duration) {
	if e.c != nil {
		e.c.Advance(d)
		return
	}
	time.Sleep(d)
}

// newKey returns a random key naming the test, so that stores sharing a
// backend (one redis-server) never see each other's keys.
func newKey(t *testing.T) string {
	return fmt.Sprintf("sluicetest/%s/%016x", t.Name(), rand.Uint64())
}

// allow calls AllowN and checks the invariants of every Decision.
func (e *env) allow(key string, lim sluice.Limit, n int) sluice.Decision {
	e.t.Helper()
	d, err := e.s.AllowN(context.Background(), key, lim, n)
	if err != nil {
		e.t.Fatalf("AllowN(%q, %v, %d) at %v: %v", key, lim, n, e.now(), err)
	}
	checkDecision(e.t, d, lim, n)
	return d
}

// checkDecision reports a Decision that breaks the contract whatever the
// state: Limit echoed, Remaining within [0, Capacity], RetryAfter 0 when
// allowed and > 0 when denied, no negative durations, a peek allowed (but
// for a limit that counts every hit, where a cost of 0 checks the debt).
func checkDecision(t *testing.T, d sluice.Decision, lim sluice.Limit, n int) {
	t.Helper()
	switch {
	case d.Limit != lim:
		t.Errorf("AllowN(%v, %d).Limit = %v, want the request's limit", lim, n, d.Limit)
	case d.Remaining < 0 || d.Remaining > lim.Capacity():
		t.Errorf("AllowN(%v, %d).Remaining = %d, want in [0, %d]", lim, n, d.Remaining, lim.Capacity())
	case d.Allowed && d.RetryAfter != 0:
		t.Errorf("AllowN(%v, %d) allowed with RetryAfter %v, want 0", lim, n, d.RetryAfter)
	case !d.Allowed && d.RetryAfter <= 0:
		t.Errorf("AllowN(%v, %d) denied with RetryAfter %v, want > 0", lim, n, d.RetryAfter)
	case d.ResetAfter < 0:
		t.Errorf("AllowN(%v, %d).ResetAfter = %v, want >= 0", lim, n, d.ResetAfter)
	case n == 0 && !d.Allowed && lim.Counting != sluice.CountAll:
		t.Errorf("AllowN(%v, 0) (a peek) denied, want allowed", lim)
	}
}

// near reports whether got is within tol of want.
func near(got, want, tol time.Duration) bool {
	return got >= want-tol && got <= want+tol
}

var algorithms = []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA}

func perSecond(a sluice.Algorithm, rate, burst int) sluice.Limit {
	return sluice.Limit{Algorithm: a, Rate: rate, Period: time.Second, Burst: burst}
}

package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/tracing"
)

// Engine decides requests through a store with a configuration. It is safe
// for concurrent use; SetConfig swaps the configuration atomically.
type Engine struct {
	store sluice.FullStore // what it lacks answers with its capability's sentinel
	multi bool             // store decides AllowMulti: at most MaxMultiRequests limits a request
	cfg   atomic.Pointer[config.Config]
	obs   Observer
	log   *slog.Logger
	now   func() time.Time

	shadowMode, quotaMode bool
	counting              sluice.Counting
	nearRatio             float32
	bounds                Bounds
	tr                    *tracing.Tracer // nil: no tracing
	// refKeys names the states as envoyproxy/ratelimit names its cache
	// keys, starting with refPrefix (WithReferenceKeys).
	refKeys   bool
	refPrefix string
	lc        *localCache // WithLocalCache; nil: none
	// chargesApart decides the limits counting all hits one store call
	// each, before the others (tests: the result of deciding them
	// together must be the same).
	chargesApart bool
}

// Option configures an Engine.
type Option func(*Engine)

// WithObserver sets the Observer (default NopObserver).
func WithObserver(o Observer) Option { return func(e *Engine) { e.obs = o } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithClock sets the clock that places fixed windows for the resets the
// engine computes itself (a requests_per_unit: 0 rule, a window with
// nothing counted yet); default time.Now.
func WithClock(now func() time.Time) Option { return func(e *Engine) { e.now = now } }

// WithShadowMode answers every request OK, as the reference's SHADOW_MODE:
// the statuses still say which descriptors are over their limits, the
// limits decide and count as they would, and metrics count the denials;
// only the overall code admits. For trying limits on live traffic.
func WithShadowMode(on bool) Option { return func(e *Engine) { e.shadowMode = on } }

// WithQuotaMode puts every limit in quota_mode, as the reference's
// QUOTA_MODE: a descriptor over its limit is reported (OK, remaining 0) but
// never denies the request.
func WithQuotaMode(on bool) Option { return func(e *Engine) { e.quotaMode = on } }

// WithCounting sets the counting of the rules that do not set their own
// (`counting:`) and of descriptors' limit overrides: sluice.CountAdmitted
// (the default) or sluice.CountAll (the reference's). A sliding_log rule
// always counts what it admits.
func WithCounting(c sluice.Counting) Option { return func(e *Engine) { e.counting = c } }

// WithNearLimitRatio sets the near-limit threshold of the Report's Near
// hits, as a fraction of each limit's capacity, 0 < r <= 1 (default
// DefaultNearLimitRatio, the reference's NEAR_LIMIT_RATIO). A value out of
// range keeps the default.
func WithNearLimitRatio(r float64) Option {
	return func(e *Engine) {
		if r > 0 && r <= 1 {
			e.nearRatio = float32(r)
		}
	}
}

// WithReferenceKeys names every state as envoyproxy/ratelimit names its
// cache keys: prefix (its CACHE_KEY_PREFIX), the domain, "_", and each of
// the descriptor's entries as key_value_ (a share_threshold wildcard's
// pattern as its value, as for every counter). A store that keeps the
// reference's item names for such keys (memcachestore's ReferenceKeys)
// then counts on the reference's own items, so that a fleet moving between
// the two keeps its counts. As in the reference, descriptors whose names
// join alike ("a_b" and "a", "b") share a state.
func WithReferenceKeys(prefix string) Option {
	return func(e *Engine) { e.refKeys, e.refPrefix = true, prefix }
}

// WithBounds sets the bounds of what callers send (default DefaultBounds).
func WithBounds(b Bounds) Option { return func(e *Engine) { e.bounds = b } }

// New returns an Engine deciding through store with configuration cfg (nil
// for none yet: every domain is then unknown).
func New(store sluice.Store, cfg *config.Config, opts ...Option) *Engine {
	e := &Engine{store: sluice.Lift(store), obs: NopObserver{}, log: slog.New(slog.DiscardHandler), now: time.Now,
		nearRatio: DefaultNearLimitRatio, bounds: DefaultBounds}
	// An AllowMulti of no request asks whether the store decides
	// AllowMulti, without a store call.
	_, err := e.store.AllowMulti(context.Background(), nil)
	e.multi = !errors.Is(err, sluice.ErrMultiUnsupported)
	for _, o := range opts {
		o(e)
	}
	e.cfg.Store(cfg)
	return e
}

// SetConfig replaces the configuration; requests already being decided
// finish with the one they started with.
func (e *Engine) SetConfig(c *config.Config) { e.cfg.Store(c) }

// Config returns the configuration in force.
func (e *Engine) Config() *config.Config { return e.cfg.Load() }

// Bounds returns the bounds of what callers send (WithBounds).
func (e *Engine) Bounds() Bounds { return e.bounds }

// limit is the limit that rule r counts with: its own, with the engine's
// counting unless the rule sets one (a sliding_log rule counts what it
// admits).
func (e *Engine) limit(r *config.Rule) sluice.Limit {
	lim := r.Limit
	if !r.CountingSet && lim.Algorithm != sluice.SlidingLog {
		lim.Counting = e.counting
	}
	return lim
}

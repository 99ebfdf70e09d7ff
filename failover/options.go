package failover

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

// Defaults.
const (
	DefaultTimeout          = 50 * time.Millisecond
	DefaultFailureThreshold = 5
	DefaultProbeInterval    = 100 * time.Millisecond
	DefaultProbeKey         = "sluice:failover:probe"
	// By default the breaker also opens when at least half of at least 20
	// calls in one second failed.
	DefaultErrorRatio    = 0.5
	DefaultErrorWindow   = time.Second
	DefaultErrorMinCalls = 20
	// DefaultLocalMaxKeys bounds the FailOpen local limiter: during an
	// outage, callers that send a new key each time cannot grow it beyond
	// this many states (the ones closest to expiring are evicted first).
	DefaultLocalMaxKeys = 100_000
)

// Option configures a Store. An option given an invalid value makes New
// fail with an error naming the option and the value.
type Option func(*config) error

// config is what the options set.
type config struct {
	timeout       time.Duration
	threshold     int
	ratio         float64
	window        time.Duration
	minCalls      int
	probeInterval time.Duration
	probeKey      string
	mode          sluice.FailureMode
	replicas      int
	obs           Observer
	log           *slog.Logger
	now           func() time.Time
	localMaxKeys  int
	startOpen     error // nil: closed at start
	// adaptive: the deadline follows the measured round trip, within
	// [floor, cap] (WithAdaptiveTimeout).
	adaptive   bool
	floor, cap time.Duration
}

func defaults() config {
	return config{
		timeout:       DefaultTimeout,
		threshold:     DefaultFailureThreshold,
		ratio:         DefaultErrorRatio,
		window:        DefaultErrorWindow,
		minCalls:      DefaultErrorMinCalls,
		probeInterval: DefaultProbeInterval,
		probeKey:      DefaultProbeKey,
		mode:          sluice.FailClosed,
		obs:           NopObserver{},
		log:           slog.New(slog.DiscardHandler),
		now:           time.Now,
		localMaxKeys:  DefaultLocalMaxKeys,
	}
}

func optionError(format string, args ...any) error {
	return fmt.Errorf("failover: "+format, args...)
}

// positive is an option that sets a duration that must be > 0.
func positive(name string, d time.Duration, set func(*config)) Option {
	return func(c *config) error {
		if d <= 0 {
			return optionError("%s(%v): want > 0", name, d)
		}
		set(c)
		return nil
	}
}

// atLeastOne is an option that sets a count that must be >= 1.
func atLeastOne(name string, n int, set func(*config)) Option {
	return func(c *config) error {
		if n < 1 {
			return optionError("%s(%d): want >= 1", name, n)
		}
		set(c)
		return nil
	}
}

// WithTimeout sets the deadline of every shared call (default
// DefaultTimeout); d must be > 0. A call whose own context ends sooner
// keeps that.
func WithTimeout(d time.Duration) Option {
	return positive("WithTimeout", d, func(c *config) { c.timeout = d })
}

// WithAdaptiveTimeout makes the deadline of every shared call follow the
// round trip measured on the shared store's answers: SRTT + max(4 RTTVAR,
// SRTT/2), as TCP's retransmission timeout sets its own, clamped to
// [floor, cap] (cap until the first answer). Use it when the shared store
// is far away (another region: tens to hundreds of milliseconds), where a
// fixed deadline is either below the round trip (every call fails) or far
// above it (an outage is noticed late). It replaces WithTimeout. The
// breaker's probes wait up to cap, so that a store whose round trip grew
// past the deadline is measured again when it answers. Set the floor
// above the delays of a busy host (a few hundred milliseconds: a call
// that waits for a scheduler is not an outage) and the cap below the
// callers' deadlines. 0 < floor <= cap is required.
func WithAdaptiveTimeout(floor, cap time.Duration) Option {
	return func(c *config) error {
		if floor <= 0 || cap < floor {
			return optionError("WithAdaptiveTimeout(%v, %v): want 0 < floor <= cap", floor, cap)
		}
		c.adaptive, c.floor, c.cap = true, floor, cap
		return nil
	}
}

// WithFailureThreshold opens the breaker after n consecutive failed shared
// calls (default DefaultFailureThreshold); n must be >= 1.
func WithFailureThreshold(n int) Option {
	return atLeastOne("WithFailureThreshold", n, func(c *config) { c.threshold = n })
}

// WithErrorRate opens the breaker when, within one window, at least
// minCalls shared calls were made and at least ratio of them failed (the
// default is DefaultErrorRatio over DefaultErrorWindow with
// DefaultErrorMinCalls). A ratio of 0 turns the rule off (window and
// minCalls are then ignored); otherwise ratio must be in (0, 1], window
// > 0 and minCalls >= 1.
func WithErrorRate(ratio float64, window time.Duration, minCalls int) Option {
	return func(c *config) error {
		switch {
		case ratio == 0:
		case math.IsNaN(ratio) || ratio < 0 || ratio > 1:
			return optionError("WithErrorRate(%g, %v, %d): want a ratio in (0, 1], or 0 for none", ratio, window, minCalls)
		case window <= 0:
			return optionError("WithErrorRate(%g, %v, %d): want a window > 0", ratio, window, minCalls)
		case minCalls < 1:
			return optionError("WithErrorRate(%g, %v, %d): want minCalls >= 1", ratio, window, minCalls)
		}
		c.ratio, c.window, c.minCalls = ratio, window, minCalls
		return nil
	}
}

// WithProbeInterval sets how often the open breaker probes the shared
// store (default DefaultProbeInterval); d must be > 0. The store is used
// again at most about this long after it answers again.
func WithProbeInterval(d time.Duration) Option {
	return positive("WithProbeInterval", d, func(c *config) { c.probeInterval = d })
}

// WithProbeKey sets the key that probes peek (n = 0, which changes
// nothing) when the shared store has no Ping (default DefaultProbeKey). It
// must be a valid key (sluice.ValidateKey).
func WithProbeKey(key string) Option {
	return func(c *config) error {
		if err := sluice.ValidateKey(key); err != nil {
			return optionError("WithProbeKey(%q): %w", key, err)
		}
		c.probeKey = key
		return nil
	}
}

// WithDefaultMode sets the failure mode of the limits whose FailureMode is
// sluice.FailDefault (default sluice.FailClosed). m must be FailClosed,
// FailError, FailOpen, FailUncounted or FailOpenUnbounded.
func WithDefaultMode(m sluice.FailureMode) Option {
	return func(c *config) error {
		switch m {
		case sluice.FailClosed, sluice.FailError, sluice.FailOpen, sluice.FailUncounted, sluice.FailOpenUnbounded:
			c.mode = m
			return nil
		}
		return optionError("WithDefaultMode(%v): want closed, error, open, uncounted or open_unbounded", m)
	}
}

// WithReplicas declares how many processes share the quota, for FailOpen
// (n must be >= 1; without it FailOpen denies): each admits at most
// floor(Rate/n) per Period during an outage, so that together they stay
// within Rate. The floor, not the ceiling: n processes each admitting
// ceil(Rate/n) would exceed Rate whenever n does not divide it. When
// Rate < n a process admits 1 per ceil(n/Rate) Periods instead (a local
// limit of 0 would be FailClosed in disguise); Burst is scaled the same
// way, with a minimum of 1.
func WithReplicas(n int) Option {
	return atLeastOne("WithReplicas", n, func(c *config) { c.replicas = n })
}

// WithObserver sets the Observer (default NopObserver); o must not be nil.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if o == nil {
			return optionError("WithObserver(nil): want an Observer (NopObserver ignores every event)")
		}
		c.obs = o
		return nil
	}
}

// WithLogger sets the logger for breaker changes (Warn, Info) and degraded
// decisions (Debug); l must not be nil. The default discards.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return optionError("WithLogger(nil): want a logger")
		}
		c.log = l
		return nil
	}
}

// WithClock sets the clock of the FailOpen local limiter (default
// time.Now); now must not be nil.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return optionError("WithClock(nil): want a clock")
		}
		c.now = now
		return nil
	}
}

// WithLocalMaxKeys bounds the states of the FailOpen local limiter (default
// DefaultLocalMaxKeys); n must be >= 1. Past it, the state closest to
// expiring is evicted, forgetting what it counted during the outage.
func WithLocalMaxKeys(n int) Option {
	return atLeastOne("WithLocalMaxKeys", n, func(c *config) { c.localMaxKeys = n })
}

// WithStartOpen starts the breaker open, with cause as its reason (nil
// means ErrUnavailable): decisions follow their failure modes from the
// first call, Ready reports false, and the prober closes the breaker at
// the shared store's first answer. It is for a shared store that cannot be
// reached yet, such as a service that starts before its Redis.
func WithStartOpen(cause error) Option {
	return func(c *config) error {
		if cause == nil {
			cause = ErrUnavailable
		}
		c.startOpen = cause
		return nil
	}
}

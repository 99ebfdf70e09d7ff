package region

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

// Defaults.
const (
	// DefaultRefresh is how much demand, beyond the round trip, one grant
	// covers: at a steady demand a key asks the home store about once per
	// DefaultRefresh, whatever its decision rate.
	DefaultRefresh = 100 * time.Millisecond
	// DefaultReportTTL is how long the home store keeps a report (and the
	// allowance reserved with it); a cut-off holder relies on its
	// allowance for at most this long after its last confirmed report.
	DefaultReportTTL = 10 * time.Second
	// DefaultMinTimeout and DefaultMaxTimeout bound the deadline of a call
	// to the home store, which otherwise follows the measured round trip
	// (SRTT + 4 RTTVAR, as TCP's retransmission timeout); before the first
	// answer it is the maximum.
	DefaultMinTimeout = 200 * time.Millisecond
	DefaultMaxTimeout = 2 * time.Second
	// DefaultLeaseTime is how long units of a TokenBucket or GCRA grant may
	// be spent (the window algorithms spend theirs within their window).
	DefaultLeaseTime = time.Second
	// DefaultMaxKeys bounds the (key, limit) states kept.
	DefaultMaxKeys = 1 << 16
	// DefaultCloseTimeout bounds Close's last reports and returns together.
	DefaultCloseTimeout = 2 * time.Second
)

// Bounds of the options.
const (
	MinRefresh = time.Millisecond
	MaxRefresh = time.Minute
)

// Option configures a Store. An option given an invalid value makes New
// fail with an error naming the option and the value.
type Option func(*config) error

type config struct {
	refresh       time.Duration
	reportTTL     time.Duration
	minTimeout    time.Duration
	maxTimeout    time.Duration
	leaseTime     time.Duration
	failOpenShare float64
	mode          sluice.FailureMode
	maxKeys       int
	closeTimeout  time.Duration
	log           *slog.Logger
}

func defaults() config {
	return config{
		refresh:       DefaultRefresh,
		reportTTL:     DefaultReportTTL,
		minTimeout:    DefaultMinTimeout,
		maxTimeout:    DefaultMaxTimeout,
		leaseTime:     DefaultLeaseTime,
		failOpenShare: 1,
		mode:          sluice.FailClosed,
		maxKeys:       DefaultMaxKeys,
		closeTimeout:  DefaultCloseTimeout,
		log:           slog.New(slog.DiscardHandler),
	}
}

func optionError(format string, args ...any) error {
	return fmt.Errorf("region: "+format, args...)
}

// WithRefresh sets how much demand, beyond the round trip, one grant
// covers (default DefaultRefresh), in [MinRefresh, MaxRefresh]. Shorter
// means fewer units held unspent and more calls to the home store.
func WithRefresh(d time.Duration) Option {
	return func(c *config) error {
		if d < MinRefresh || d > MaxRefresh {
			return optionError("WithRefresh(%v): want %v to %v", d, MinRefresh, MaxRefresh)
		}
		c.refresh = d
		return nil
	}
}

// WithReportTTL sets how long the home store keeps this holder's report
// and the allowance reserved with it (default DefaultReportTTL), in
// [sluice.MinGrantTTL, sluice.MaxGrantTTL]. A region cut off for longer
// than this decides FailOpen limits as FailClosed from then on, since the
// others may be granted its allowance.
func WithReportTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < sluice.MinGrantTTL || d > sluice.MaxGrantTTL {
			return optionError("WithReportTTL(%v): want %v to %v", d, sluice.MinGrantTTL, sluice.MaxGrantTTL)
		}
		c.reportTTL = d
		return nil
	}
}

// WithTimeout bounds the deadline of a call to the home store (default
// DefaultMinTimeout and DefaultMaxTimeout): the deadline follows the
// measured round trip, SRTT + 4 RTTVAR, clamped to [min, max]. 0 < min <=
// max is required.
func WithTimeout(min, max time.Duration) Option {
	return func(c *config) error {
		if min <= 0 || max < min {
			return optionError("WithTimeout(%v, %v): want 0 < min <= max", min, max)
		}
		c.minTimeout, c.maxTimeout = min, max
		return nil
	}
}

// WithLeaseTime sets how long the units of a TokenBucket or GCRA grant may
// be spent (default DefaultLeaseTime); d must be > 0. Spent up to d after
// the store admitted them, they widen that algorithm's bound in real time
// by d (see the package documentation).
func WithLeaseTime(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return optionError("WithLeaseTime(%v): want > 0", d)
		}
		c.leaseTime = d
		return nil
	}
}

// WithFailOpenShare sets the fraction f of this holder's share (by
// demand) that a FailOpen limit reserves at the home store as its
// allowance, and so may admit per window while cut off (default 1: its
// whole share); f in [0, 1]. The other holders give that room up while
// this one might be cut off.
func WithFailOpenShare(f float64) Option {
	return func(c *config) error {
		if math.IsNaN(f) || f < 0 || f > 1 {
			return optionError("WithFailOpenShare(%g): want a fraction in [0, 1]", f)
		}
		c.failOpenShare = f
		return nil
	}
}

// WithDefaultMode sets the failure mode of the limits whose FailureMode
// is sluice.FailDefault (default sluice.FailClosed).
func WithDefaultMode(m sluice.FailureMode) Option {
	return func(c *config) error {
		switch m {
		case sluice.FailClosed, sluice.FailOpen, sluice.FailOpenUnbounded:
			c.mode = m
			return nil
		}
		return optionError("WithDefaultMode(%v): want closed, open or open_unbounded", m)
	}
}

// WithMaxKeys bounds the (key, limit) states kept (default
// DefaultMaxKeys); n >= 1. When full, a new key's decisions go to the home
// store's AllowN, one round trip each, until room is made.
func WithMaxKeys(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return optionError("WithMaxKeys(%d): want >= 1", n)
		}
		c.maxKeys = n
		return nil
	}
}

// WithCloseTimeout bounds Close's last reports and returns together
// (default DefaultCloseTimeout); d must be > 0.
func WithCloseTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return optionError("WithCloseTimeout(%v): want > 0", d)
		}
		c.closeTimeout = d
		return nil
	}
}

// WithLogger sets the logger (default: discard) for the link's changes
// (Warn, Info) and failed calls (Debug); l must not be nil.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return optionError("WithLogger(nil): want a logger")
		}
		c.log = l
		return nil
	}
}

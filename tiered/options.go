package tiered

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// DefaultReturnTimeout bounds each Return.
const DefaultReturnTimeout = 250 * time.Millisecond

// DefaultCloseTimeout bounds all of Close's Returns together.
const DefaultCloseTimeout = 2 * time.Second

// DefaultMaxKeys bounds the (key, limit) states kept locally.
const DefaultMaxKeys = 1 << 20

// Option configures a Store. An option given an invalid value makes New
// fail with an error naming the option and the value.
type Option func(*Store) error

func optionError(format string, args ...any) error {
	return fmt.Errorf("tiered: "+format, args...)
}

// positive is an option that sets a duration that must be > 0.
func positive(name string, d time.Duration, set func(*Store)) Option {
	return func(s *Store) error {
		if d <= 0 {
			return optionError("%s(%v): want > 0", name, d)
		}
		set(s)
		return nil
	}
}

// inUnit reports whether f is in (0, 1], or in (0, 1) when open.
func inUnit(f float64, open bool) bool {
	return !math.IsNaN(f) && f > 0 && (f < 1 || f == 1 && !open)
}

// fraction is an option that sets f, which must be in (0, 1], or in (0, 1)
// when open; what names it in the error.
func fraction(name, what string, f float64, open bool, set func(*Store)) Option {
	return func(s *Store) error {
		if !inUnit(f, open) {
			end := "]"
			if open {
				end = ")"
			}
			return optionError("%s(%g): want %s in (0, 1%s", name, f, what, end)
		}
		set(s)
		return nil
	}
}

// WithLeases turns leases on (when the shared store implements
// sluice.Reserver): a key's lease is at most max units and at most fraction
// of the limit's capacity (rounded down, at least 1), and is spent for at
// most lifetime (less for the window algorithms: see the package
// documentation). max must be >= 1, fraction in (0, 1] and lifetime > 0.
func WithLeases(max int, fraction float64, lifetime time.Duration) Option {
	return func(s *Store) error {
		if max < 1 || !inUnit(fraction, false) || lifetime <= 0 {
			return optionError("WithLeases(%d, %g, %v): want max >= 1, fraction in (0, 1], lifetime > 0", max, fraction, lifetime)
		}
		s.leaseMax, s.leaseFraction, s.lifetime = max, fraction, lifetime
		return nil
	}
}

// WithRefreshAhead takes a key's next lease in the background once its
// current lease is down to lowWater of its size (for example 0.25), so
// that under steady demand no caller waits for the shared store: the
// caller that spends the last unit finds the next lease already there. A
// key then holds up to two leases at once, so up to twice the units sit
// unspent in this process; the shared store counts them all, so the fleet
// stays exact. lowWater must be in (0, 1), and it needs WithLeases.
func WithRefreshAhead(lowWater float64) Option {
	return fraction("WithRefreshAhead", "a low water", lowWater, true, func(s *Store) { s.refresh = lowWater })
}

// WithStampedLeases also leases SlidingLog, TokenBucket and GCRA limits
// (by default only FixedWindow and SlidingWindow are leased, the others
// deciding through the denial cache alone). The shared store counts their
// units from the lease's time, so its count stays exact over those stamps,
// but a unit spent up to the lease's lifetime L after its stamp widens the
// bound in real time: at most Rate in any interval of length Period − L
// (SlidingLog), at most Burst + Rate·(t+L)/Period in an interval t
// (buckets). See the package documentation. It needs WithLeases.
func WithStampedLeases() Option {
	return func(s *Store) error { s.stamped = true; return nil }
}

// WithApproximateLocalShare turns on the approximate local tier: a local
// limiter at fraction f of each limit admits first, uncounted by the
// shared store. NOT exact: the fleet may exceed the quota by the sum of the
// local shares (see the package documentation). f must be in (0, 1].
func WithApproximateLocalShare(f float64) Option {
	return fraction("WithApproximateLocalShare", "a fraction", f, false, func(s *Store) { s.share = f })
}

// WithMaxKeys bounds the (key, limit) states kept locally (default
// DefaultMaxKeys; idle ones are forgotten after a second or two lifetimes);
// n must be >= 1. When full, a new key's decisions go to the shared store
// directly, with neither a cached denial nor a lease, until room is made:
// exact, only slower.
func WithMaxKeys(n int) Option {
	return func(s *Store) error {
		if n < 1 {
			return optionError("WithMaxKeys(%d): want >= 1", n)
		}
		s.shardCap = max(n/numShards, 1)
		return nil
	}
}

// WithReturnTimeout bounds each Return (default DefaultReturnTimeout); d
// must be > 0.
func WithReturnTimeout(d time.Duration) Option {
	return positive("WithReturnTimeout", d, func(s *Store) { s.returnTimeout = d })
}

// WithCloseTimeout bounds Close's Returns together (default
// DefaultCloseTimeout); d must be > 0. A Close on an unreachable store
// takes at most about this long.
func WithCloseTimeout(d time.Duration) Option {
	return positive("WithCloseTimeout", d, func(s *Store) { s.closeTimeout = d })
}

// WithLogger sets the logger for failed returns (default: discard); l must
// not be nil.
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) error {
		if l == nil {
			return optionError("WithLogger(nil): want a logger")
		}
		s.log = l
		return nil
	}
}

// WithClock sets the local clock that times cached denials and leases
// (default: the monotonic clock); now must not be nil. Tests pass the fake
// clock of the shared store.
func WithClock(now func() time.Time) Option {
	return func(s *Store) error {
		if now == nil {
			return optionError("WithClock(nil): want a clock")
		}
		s.clock = now
		return nil
	}
}

// checkOptions reports options that need others.
func (s *Store) checkOptions() error {
	if s.leaseMax == 0 {
		switch {
		case s.refresh > 0:
			return errors.New("tiered: WithRefreshAhead needs WithLeases")
		case s.stamped:
			return errors.New("tiered: WithStampedLeases needs WithLeases")
		}
	}
	return nil
}

package sluice

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// Algorithm selects how a Limit counts. The zero value is not a valid
// algorithm: an unset algorithm is an error, never a silent default.
type Algorithm uint8

const (
	// FixedWindow counts admissions in epoch-aligned windows
	// [floor(now/P)*P, +P), like envoyproxy/ratelimit. Cheap; admits up to
	// 2×Rate across a window boundary.
	FixedWindow Algorithm = iota + 1
	// SlidingLog keeps the time of every admitted event: no interval of
	// length Period ever holds more than Rate admissions. Its memory grows
	// with the admissions of the last Period (one entry per distinct time of
	// admission, up to Rate), the work of a decision with their logarithm
	// (docs/bounds.md); Rate is at most one per microsecond of Period.
	SlidingLog
	// SlidingWindow is the sliding-window counter: the previous window's
	// count weighted by the part of it still inside the sliding window, plus
	// the current window's count. Two counters per key, any Rate.
	SlidingWindow
	// TokenBucket holds up to Burst tokens and refills Rate per Period.
	TokenBucket
	// GCRA is the generic cell rate algorithm: the same admissions as
	// TokenBucket, kept as one theoretical arrival time per key.
	GCRA
)

var algorithms = enum[Algorithm]{
	typ:  "Algorithm",
	noun: "algorithm",
	names: []string{
		FixedWindow:   "fixed_window",
		SlidingLog:    "sliding_log",
		SlidingWindow: "sliding_window",
		TokenBucket:   "token_bucket",
		GCRA:          "gcra",
	},
	want: "fixed_window, sliding_log, sliding_window, token_bucket or gcra",
}

// String returns the algorithm's configuration name, such as "gcra".
func (a Algorithm) String() string { return algorithms.String(a) }

func (a Algorithm) valid() bool { return algorithms.valid(a) }

// ParseAlgorithm parses a configuration name: fixed_window, sliding_log,
// sliding_window, token_bucket or gcra.
func ParseAlgorithm(s string) (Algorithm, error) { return algorithms.parse(s) }

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) { return algorithms.marshal(a) }

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err == nil {
		*a = v
	}
	return err
}

// Limit is a quota: Rate events per Period, counted by Algorithm.
type Limit struct {
	Algorithm Algorithm
	// FailureMode is how a failover store decides for this limit while its
	// shared store does not answer; FailDefault (the zero value) is that
	// store's default. Every other store ignores it.
	FailureMode FailureMode `json:",omitempty"`
	// Counting says which hits the limit records: CountAdmitted (the zero
	// value) only what it admits, CountAll every hit (see Counting).
	Counting Counting      `json:",omitempty"`
	Rate     int           // events allowed per Period, > 0
	Period   time.Duration // >= 1ms, a whole number of microseconds
	Burst    int           // TokenBucket/GCRA capacity; 0 means Rate
}

// MinPeriod is the shortest Period a Limit may have.
const MinPeriod = time.Millisecond

// MaxKeyLen is the longest key, in bytes, that a store accepts.
const MaxKeyLen = 1024

// PerSecond returns a GCRA limit of n events per second.
func PerSecond(n int) Limit { return Limit{Algorithm: GCRA, Rate: n, Period: time.Second} }

// PerMinute returns a GCRA limit of n events per minute.
func PerMinute(n int) Limit { return Limit{Algorithm: GCRA, Rate: n, Period: time.Minute} }

// PerHour returns a GCRA limit of n events per hour.
func PerHour(n int) Limit { return Limit{Algorithm: GCRA, Rate: n, Period: time.Hour} }

// Every returns a GCRA limit of one event per interval, with room for burst
// events at once (0 means 1).
func Every(interval time.Duration, burst int) Limit {
	return Limit{Algorithm: GCRA, Rate: 1, Period: interval, Burst: burst}
}

// With returns a copy of l counted by algorithm a.
func (l Limit) With(a Algorithm) Limit { l.Algorithm = a; return l }

// WithBurst returns a copy of l with the given Burst.
func (l Limit) WithBurst(burst int) Limit { l.Burst = burst; return l }

// WithFailureMode returns a copy of l that fails by mode m.
func (l Limit) WithFailureMode(m FailureMode) Limit { l.FailureMode = m; return l }

// WithCounting returns a copy of l that records hits by c.
func (l Limit) WithCounting(c Counting) Limit { l.Counting = c; return l }

// Capacity is the largest n a single request may ask for: Burst (or Rate
// when Burst is 0) for TokenBucket and GCRA, Rate otherwise.
func (l Limit) Capacity() int {
	if (l.Algorithm == TokenBucket || l.Algorithm == GCRA) && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// Validate reports the first invalid field of l as a *LimitError, which
// wraps ErrInvalidLimit.
func (l Limit) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &LimitError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case !l.Algorithm.valid():
		if l.Algorithm == 0 {
			return bad("Algorithm", "Algorithm is unset")
		}
		return bad("Algorithm", "Algorithm %d is unknown", l.Algorithm)
	case l.Rate <= 0:
		return bad("Rate", "Rate %d must be > 0", l.Rate)
	case l.Period < MinPeriod:
		return bad("Period", "Period %v must be >= %v", l.Period, MinPeriod)
	case l.Period%time.Microsecond != 0:
		return bad("Period", "Period %v must be a whole number of microseconds", l.Period)
	case l.Burst < 0:
		return bad("Burst", "Burst %d must be >= 0", l.Burst)
	case l.Burst != 0 && l.Algorithm != TokenBucket && l.Algorithm != GCRA:
		return bad("Burst", "Burst %d applies only to token_bucket and gcra, not %v", l.Burst, l.Algorithm)
	case !l.FailureMode.valid():
		return bad("FailureMode", "FailureMode %d is unknown", l.FailureMode)
	case !l.Counting.valid():
		return bad("Counting", "Counting %d is unknown", l.Counting)
	case l.Counting == CountAll && l.Algorithm == SlidingLog:
		return bad("Counting", "sliding_log keeps one entry per admitted unit and cannot count hits beyond its Rate; use sliding_window to count every hit")
	}
	if err := algo.CheckBounds(l.kind(), int64(l.Rate), int64(l.Burst), l.Period.Microseconds()); err != nil {
		var be *algo.BoundsError
		if errors.As(err, &be) {
			return &LimitError{Field: be.Field, Reason: be.Msg}
		}
		return &LimitError{Field: "Rate", Reason: err.Error()}
	}
	return nil
}

// String describes l, as in "10 per 1s (gcra, burst 10)".
func (l Limit) String() string {
	s := strconv.Itoa(l.Rate) + " per " + l.Period.String() + " (" + l.Algorithm.String()
	if l.Algorithm == TokenBucket || l.Algorithm == GCRA {
		s += ", burst " + strconv.Itoa(l.Capacity())
	}
	if l.FailureMode != FailDefault {
		s += ", fails " + l.FailureMode.String()
	}
	if l.Counting != CountAdmitted {
		s += ", counts " + l.Counting.String()
	}
	return s + ")"
}

func (l Limit) kind() algo.Kind { return algo.Kind(l.Algorithm) }

// MaxMultiRequests is the most requests one AllowMulti call may decide. A
// call is one atomic step (on Redis, one script, which blocks the server
// while it runs), so its work must stay small whatever the caller asks:
// at this bound the largest call runs in about half a millisecond of Redis
// time (docs/bounds.md). A larger call is an error wrapping
// ErrExceedsCapacity.
const MaxMultiRequests = 16

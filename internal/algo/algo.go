// Package algo is the single source of sluice's rate-limiting math: one pure
// step function per algorithm over integer microseconds and a small state
// value. Every store (memory, the Redis Lua scripts) implements exactly
// these semantics, and the conformance suite and the differential fuzzers
// hold them to it.
//
// Conventions shared by every step function:
//   - now and every duration are integer microseconds since the Unix epoch;
//   - a denied request changes no state: the caller keeps the old state
//     (the step functions return it unchanged);
//   - n = 0 is a peek: it is always allowed and changes nothing;
//   - n > Params.Cap is the caller's error to report (ErrExceedsCapacity)
//     before calling;
//   - time never goes backwards for a key: now is clamped to the newest time
//     the state has seen (the buckets, TokenBucket and GCRA, keep no time of
//     last use but the time they are full again, and need no clamp: a now
//     behind it finds them emptier, and their waits count from it);
//   - Remaining is never negative, even for a state written under a larger
//     limit (Rate or Burst lowered since).
//
// The Charge steps (charge.go) are those of a limit that counts every hit:
// they change the state on a denial too, and take an n above Params.Cap.
//
// All intermediate products stay below 2^53 for limits that pass
// CheckBounds, so that the same integer math is exact in Lua's doubles.
package algo

import "fmt"

// Kind numbers the algorithms as sluice.Algorithm does.
type Kind uint8

// The algorithms, numbered as sluice.Algorithm.
const (
	FixedWindow Kind = iota + 1
	SlidingLog
	SlidingWindow
	TokenBucket
	GCRA
)

// MaxExact is the largest integer every intermediate value must stay below
// so that the math is exact in IEEE doubles (Lua numbers in Redis).
const MaxExact = 1 << 53

// Params is a validated limit in integer form.
type Params struct {
	Kind   Kind
	Rate   int64 // events per Period
	Period int64 // µs
	Cap    int64 // largest n at once: Burst (or Rate) for buckets, Rate otherwise
	// R and P are Rate and Period divided by their greatest common divisor:
	// the bucket algorithms refill R scaled units per µs, and one token is P
	// scaled units, so the emission interval P/R is exact without fractions
	// of a microsecond being lost.
	R, P int64
	// Ahead is how far (µs) a bucket's TAT may lie ahead of now and still be
	// at most a full bucket away, Cap·P/R + 1, kept so that a decision need
	// not divide for it (0 for the other kinds).
	Ahead int64
	// Debt bounds what a limit that counts every hit (the Charge steps)
	// keeps: a window's count, or a bucket's scaled deficit.
	Debt int64
	// Charge marks a limit that counts every hit: its stores run the
	// Charge steps. NewParams leaves it false.
	Charge bool
}

// NewParams converts a limit that passed CheckBounds.
func NewParams(k Kind, rate, burst, period int64) Params {
	p := Params{Kind: k, Rate: rate, Period: period, Cap: rate}
	if (k == TokenBucket || k == GCRA) && burst > 0 {
		p.Cap = burst
	}
	g := gcd(rate, period)
	p.R, p.P = rate/g, period/g
	p.Debt = debtOf(k, period)
	if k == TokenBucket || k == GCRA {
		p.Ahead = p.Cap*p.P/p.R + 1 // below 2^53 for limits that pass CheckBounds
	}
	return p
}

// BoundsError reports a limit whose arithmetic could not stay exact:
// Field is the limit's field to change ("Rate", "Burst" or "Period").
type BoundsError struct {
	Field string
	Msg   string
}

func (e *BoundsError) Error() string { return e.Msg }

func boundsErr(field, format string, args ...any) error {
	return &BoundsError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// CheckBounds reports, as a *BoundsError, a limit whose arithmetic could
// not stay exact below MaxExact. Rate, burst and period (µs) are assumed
// positive (burst >= 0).
func CheckBounds(k Kind, rate, burst, period int64) error {
	if period >= MaxExact/2 {
		return boundsErr("Period", "Period of %dµs is too long", period)
	}
	switch k {
	case SlidingWindow:
		// prev*(P-e) and (a+1)*P are at most (Rate+1)*Period.
		if rate >= MaxExact/2 || (rate+1) > (MaxExact-1)/period {
			return boundsErr("Rate", "Rate × Period (%d × %dµs) is too large for exact sliding_window arithmetic (limit 2^53); use a shorter Period or fixed_window", rate, period)
		}
	case TokenBucket, GCRA:
		c := rate
		if burst > 0 {
			c = burst
		}
		g := gcd(rate, period)
		pp, rr := period/g, rate/g
		// The scaled deficit plus one request's worth is at most 2·Cap·P.
		if c >= MaxExact/4 || 2*c > (MaxExact-1)/pp {
			field := "Rate" // the capacity's field
			if burst > 0 {
				field = "Burst"
			}
			return boundsErr(field, "Burst × Period/gcd(Rate, Period) (%d × %dµs) is too large for exact %s arithmetic (limit 2^52)", c, pp, kindName(k))
		}
		// GCRA's deficit (TAT-now)·R + Frac is formed up to Cap·P + 2·R, one
		// request more is 2·Cap·P + 2·R, and rounding up a division by R
		// adds R: a Rate far above Burst must not push that past 2^53.
		if rr >= MaxExact/8 || 2*c*pp+3*rr > MaxExact-1 {
			return boundsErr("Rate", "Rate %d per %dµs is too large for exact %s arithmetic with Burst %d (limit 2^53)", rate, period, kindName(k), c)
		}
	case SlidingLog:
		// The log numbers the units it admits (Log): at most one per µs of
		// the Period on average keeps the numbers below 2^53 for centuries
		// of continuous use.
		if rate > period {
			return boundsErr("Rate", "Rate %d per %dµs is more than sliding_log's maximum of one per microsecond; use sliding_window", rate, period)
		}
	case FixedWindow:
		if rate >= MaxExact/2 {
			return boundsErr("Rate", "Rate %d is too large", rate)
		}
	default:
		return boundsErr("Algorithm", "unknown algorithm")
	}
	return nil
}

func kindName(k Kind) string {
	switch k {
	case TokenBucket:
		return "token_bucket"
	case GCRA:
		return "gcra"
	}
	return "algorithm"
}

// Result is the outcome of one step, in microseconds.
type Result struct {
	Allowed    bool
	Remaining  int64 // what could still be admitted now
	RetryAfter int64 // 0 when allowed; else the wait after which n is admitted, absent other traffic
	ResetAfter int64 // time until the state is back to full and untouched
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// floorWindow returns the start of the epoch-aligned window holding now,
// floor(now/period)*period, also for a now before the epoch (where Go's %
// truncates toward zero; Lua's % already floors).
func floorWindow(now, period int64) int64 {
	m := now % period
	if m < 0 {
		m += period
	}
	return now - m
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}

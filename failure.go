package sluice

// FailureMode is what a decision becomes when the store that counts cannot
// make it: a failover.Store in front of Redis, while Redis does not answer.
// A Limit carries it, so that each limit (a route, a rule) can fail its own
// way; stores that cannot fail ignore it. The zero value, FailDefault, is
// the failover store's default mode.
type FailureMode uint8

const (
	// FailDefault leaves the decision to the failover store's default mode.
	FailDefault FailureMode = iota
	// FailClosed denies, with a RetryAfter of when the shared store may
	// answer again.
	FailClosed
	// FailOpen admits through a strict local limit, this process's share
	// of the quota (Rate divided by the number of replicas).
	FailOpen
	// FailOpenUnbounded admits everything. Never a default unless named.
	FailOpenUnbounded
	// FailError makes no decision: the call returns an error wrapping
	// ErrNoDecision (and the cause of the failure), so that the caller's
	// own policy decides, as Envoy's rate-limit filter does with its
	// failure_mode_deny when its rate-limit service answers an error.
	FailError
	// FailUncounted decides each request as if nothing had been counted
	// for its key, and counts nothing: a request within the limit's
	// capacity is admitted, with the Remaining and resets of an untouched
	// state. It is envoyproxy/ratelimit's answer while its memcached does
	// not answer (a count that cannot be read is 0); with several
	// replicas or many requests it admits far more than the limit.
	FailUncounted
)

var failureModes = enum[FailureMode]{
	typ:  "FailureMode",
	noun: "failure mode",
	names: []string{
		FailDefault:       "default",
		FailClosed:        "closed",
		FailOpen:          "open",
		FailOpenUnbounded: "open_unbounded",
		FailError:         "error",
		FailUncounted:     "uncounted",
	},
	want: "closed, error, open, uncounted or open_unbounded",
}

func (m FailureMode) valid() bool { return failureModes.valid(m) }

// String returns the mode's configuration name: default, closed, error,
// open, uncounted or open_unbounded.
func (m FailureMode) String() string { return failureModes.String(m) }

// ParseFailureMode parses closed, error, open, uncounted or open_unbounded (and
// default, or the empty string, for FailDefault).
func ParseFailureMode(s string) (FailureMode, error) {
	if s == "" {
		return FailDefault, nil
	}
	return failureModes.parse(s)
}

// MarshalText implements encoding.TextMarshaler.
func (m FailureMode) MarshalText() ([]byte, error) { return failureModes.marshal(m) }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *FailureMode) UnmarshalText(b []byte) error {
	v, err := ParseFailureMode(string(b))
	if err == nil {
		*m = v
	}
	return err
}

// Stricter returns the stricter of m and o, for a decision that several
// limits share (AllowMulti): FailClosed before FailError before FailOpen
// before FailUncounted before FailOpenUnbounded; FailDefault only when
// both are. FailError comes after FailClosed, which denies for certain,
// and before the modes that admit by themselves: an error admits nothing
// unless the caller's policy does. FailUncounted admits each request up
// to the limit's capacity, more than FailOpen's share and less than
// FailOpenUnbounded.
func (m FailureMode) Stricter(o FailureMode) FailureMode {
	switch {
	case m == FailDefault:
		return o
	case o == FailDefault:
		return m
	}
	if strictness(o) < strictness(m) {
		return o
	}
	return m
}

// strictness orders the modes for Stricter, strictest first.
func strictness(m FailureMode) int {
	switch m {
	case FailClosed:
		return 0
	case FailError:
		return 1
	case FailOpen:
		return 2
	case FailUncounted:
		return 3
	}
	return 4 // FailOpenUnbounded, or a mode that is not valid
}

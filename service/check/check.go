// Package check is what POST /v1/check accepts: a caller's own key, in a
// keyspace of its own, and the limit and cost to decide it by. The endpoint
// (service/server) and the admin API's key selectors (service/admin), which
// inspect and reset the state /v1/check counts on, parse them here, once,
// against the server's bounds.
package check

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/engine"
)

// KeyPrefix puts /v1/check keys in their own namespace in the store:
// configured RLS keys never start with '*' (service/config escapes it), so
// no caller of /v1/check can spend an RLS descriptor's quota or the
// reverse.
const KeyPrefix = "*check/"

// MaxKeyLen is the longest key POST /v1/check accepts, in bytes.
const MaxKeyLen = sluice.MaxKeyLen - len(KeyPrefix)

// StoreKey is key as the store counts it: in /v1/check's namespace.
func StoreKey(key string) string { return KeyPrefix + key }

// Request is the body of POST /v1/check.
type Request struct {
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	Rate      int    `json:"rate"`
	Period    string `json:"period"` // a Go duration: "1s", "30s", "1h30m"
	Burst     int    `json:"burst"`
	Cost      *int   `json:"cost"` // default 1; 0 asks without spending
}

// Response is the body of a 200 answer of POST /v1/check.
type Response struct {
	Allowed      bool  `json:"allowed"`
	Limit        int   `json:"limit"`
	Remaining    int   `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
}

// ResponseOf is the answer of decision d under lim.
func ResponseOf(lim sluice.Limit, d sluice.Decision) Response {
	return Response{Allowed: d.Allowed, Limit: lim.Capacity(), Remaining: d.Remaining,
		RetryAfterMS: Millis(d.RetryAfter), ResetAfterMS: Millis(d.ResetAfter)}
}

// Check is a Request parsed and checked: what to ask the store.
type Check struct {
	Key   string // as sent, without KeyPrefix
	Limit sluice.Limit
	N     int // the cost
}

// StoreKey is the key of c in the store.
func (c Check) StoreKey() string { return StoreKey(c.Key) }

// FieldError is a request that cannot be decided as sent: Field names the
// request field (key, algorithm, rate, period, burst, cost).
type FieldError struct{ Field, Msg string }

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Parse checks r, before the store is asked anything: a key of 1 to
// MaxKeyLen bytes of UTF-8, a known algorithm, a duration for the period,
// then the server's bounds b (they name the flag an operator can change),
// the limit's own rules (sluice.Limit.Validate) and a cost of 0 to the
// limit's capacity (a larger one could never be admitted).
func Parse(r Request, b engine.Bounds) (Check, *FieldError) {
	switch {
	case r.Key == "":
		return Check{}, &FieldError{"key", "missing or empty"}
	case len(r.Key) > MaxKeyLen:
		return Check{}, &FieldError{"key", fmt.Sprintf("%d bytes, longer than %d", len(r.Key), MaxKeyLen)}
	case !utf8.ValidString(r.Key):
		return Check{}, &FieldError{"key", "not valid UTF-8"}
	case r.Algorithm == "":
		return Check{}, &FieldError{"algorithm", "missing (want fixed_window, sliding_log, sliding_window, token_bucket or gcra)"}
	case r.Period == "":
		return Check{}, &FieldError{"period", `missing (a duration such as "1s" or "30s")`}
	}
	a, err := sluice.ParseAlgorithm(r.Algorithm)
	if err != nil {
		return Check{}, LimitFieldError(err)
	}
	p, err := time.ParseDuration(r.Period)
	if err != nil {
		return Check{}, &FieldError{"period", fmt.Sprintf("%q is not a duration such as \"1s\" or \"30s\"", r.Period)}
	}
	c := Check{Key: r.Key, Limit: sluice.Limit{Algorithm: a, Rate: r.Rate, Period: p, Burst: r.Burst}, N: 1}
	if r.Cost != nil {
		c.N = *r.Cost
	}
	if be, ok := errors.AsType[*engine.BoundError](b.CheckLimit(c.Limit, c.N)); ok {
		return Check{}, &FieldError{be.Field, be.Error()}
	}
	if err := c.Limit.Validate(); err != nil {
		return Check{}, LimitFieldError(err)
	}
	if c.N < 0 {
		return Check{}, &FieldError{"cost", fmt.Sprintf("%d must be >= 0", c.N)}
	}
	if capacity := c.Limit.Capacity(); c.N > capacity {
		return Check{}, &FieldError{"cost", fmt.Sprintf("%d exceeds the limit's capacity %d: it could never be admitted", c.N, capacity)}
	}
	return c, nil
}

// LimitFieldError is the FieldError of an invalid limit (a
// *sluice.LimitError): the request field is the limit's field in lower case
// (rate, period, burst, algorithm; max, lease for a concurrency limit), and
// the message the error's reason.
func LimitFieldError(err error) *FieldError {
	if le, ok := errors.AsType[*sluice.LimitError](err); ok {
		return &FieldError{strings.ToLower(le.Field), le.Reason}
	}
	return &FieldError{"", err.Error()}
}

// Millis is d in whole milliseconds, rounded up, as the HTTP API's *_ms
// fields carry a time to wait: 0 for d <= 0, never less.
func Millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

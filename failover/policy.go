package failover

import (
	"context"
	"strconv"
)

// Policy decides what a decision is when the shared store cannot make it.
// The zero value means "the store's default".
type Policy uint8

const (
	// FailClosed denies, reporting the cause. The default.
	FailClosed Policy = iota + 1
	// FailOpen admits through a strict local limiter at Rate/Replicas per
	// Period (see WithReplicas).
	FailOpen
	// FailOpenUnbounded admits everything. Never a default unless named.
	FailOpenUnbounded
)

var policyNames = [...]string{
	FailClosed:        "fail_closed",
	FailOpen:          "fail_open",
	FailOpenUnbounded: "fail_open_unbounded",
}

func (p Policy) valid() bool { return p >= FailClosed && p <= FailOpenUnbounded }

// String returns the configuration name, such as "fail_open".
func (p Policy) String() string {
	if p.valid() {
		return policyNames[p]
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// ParsePolicy parses fail_closed, fail_open or fail_open_unbounded.
func ParsePolicy(s string) (Policy, error) {
	for p := FailClosed; p <= FailOpenUnbounded; p++ {
		if policyNames[p] == s {
			return p, nil
		}
	}
	return 0, &policyError{s}
}

type policyError struct{ s string }

func (e *policyError) Error() string {
	return "failover: unknown policy " + strconv.Quote(e.s) + " (want fail_closed, fail_open or fail_open_unbounded)"
}

type policyKey struct{}

// WithPolicy returns a context whose decisions, when degraded, follow p
// instead of the store's default: per-route middleware and per-rule
// failure modes set it. An invalid p leaves the default in force.
func WithPolicy(ctx context.Context, p Policy) context.Context {
	return context.WithValue(ctx, policyKey{}, p)
}

// PolicyFrom returns the policy set by WithPolicy, or 0.
func PolicyFrom(ctx context.Context) Policy {
	p, _ := ctx.Value(policyKey{}).(Policy)
	return p
}

// Report receives, through WithReport, how a call was decided.
type Report struct {
	// Degraded is true when the decision was made without the shared
	// store's answer.
	Degraded bool
	// Policy is the policy that made a degraded decision.
	Policy Policy
	// Cause is why the shared store did not answer: it wraps
	// ErrBreakerOpen, ErrUnavailable or ErrNoReplicas.
	Cause error
}

type reportKey struct{}

// WithReport returns a context in which a degraded decision fills r (which
// the caller must not read concurrently with the call). A call that the
// shared store answered leaves r as it was.
func WithReport(ctx context.Context, r *Report) context.Context {
	return context.WithValue(ctx, reportKey{}, r)
}

func reportFrom(ctx context.Context) *Report {
	r, _ := ctx.Value(reportKey{}).(*Report)
	return r
}

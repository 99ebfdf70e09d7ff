// Package storewire translates between package sluice's types and the
// messages of the store API (sluice.store.v1): the one place where both
// sides of the wire, remotestore's client and service/storeapi's server,
// turn a Limit, a Decision, a time or an error into protobuf and back, so
// that what a client reads is what the serving store answered, field for
// field.
package storewire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice"
	storev1 "github.com/sluicehq/sluice/api/sluice/store/v1"
)

// Limit is lim on the wire.
func Limit(lim sluice.Limit) *storev1.Limit {
	return &storev1.Limit{
		Algorithm:   storev1.Algorithm(lim.Algorithm),
		Rate:        int64(lim.Rate),
		PeriodNanos: int64(lim.Period),
		Burst:       int64(lim.Burst),
		FailureMode: storev1.FailureMode(lim.FailureMode),
		Counting:    storev1.Counting(lim.Counting),
	}
}

// ToLimit is the sluice.Limit of p (a missing limit is the zero Limit,
// which no store accepts). An enum beyond the range of its Go type, or an
// integer beyond int, is a *sluice.LimitError naming the field: the same
// error a store gives for an unknown value, so that no value is taken for
// another.
func ToLimit(p *storev1.Limit) (sluice.Limit, error) {
	var lim sluice.Limit
	if p == nil {
		return lim, nil
	}
	a, fm, c := int32(p.Algorithm), int32(p.FailureMode), int32(p.Counting)
	switch {
	case a < 0 || a > math.MaxUint8:
		return lim, badField("Algorithm", "Algorithm %d is unknown", a)
	case fm < 0 || fm > math.MaxUint8:
		return lim, badField("FailureMode", "FailureMode %d is unknown", fm)
	case c < 0 || c > math.MaxUint8:
		return lim, badField("Counting", "Counting %d is unknown", c)
	case !fitsInt(p.Rate):
		return lim, badField("Rate", "Rate %d is out of range", p.Rate)
	case !fitsInt(p.Burst):
		return lim, badField("Burst", "Burst %d is out of range", p.Burst)
	}
	return sluice.Limit{
		Algorithm:   sluice.Algorithm(a),
		FailureMode: sluice.FailureMode(fm),
		Counting:    sluice.Counting(c),
		Rate:        int(p.Rate),
		Period:      time.Duration(p.PeriodNanos),
		Burst:       int(p.Burst),
	}, nil
}

// ToCost is n as an int, or a *sluice.LimitError on "N" when it does not
// fit in one (a 32-bit platform).
func ToCost(n int64) (int, error) {
	if !fitsInt(n) {
		return 0, &sluice.LimitError{Field: "N", Reason: fmt.Sprintf("n = %d is out of range", n), Err: sluice.ErrExceedsCapacity}
	}
	return int(n), nil
}

func fitsInt(v int64) bool { return int64(int(v)) == v }

func badField(field, format string, args ...any) error {
	return &sluice.LimitError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Decision is d on the wire; its limit is left out when it is req, the
// limit of the request (ToDecision puts it back).
func Decision(d sluice.Decision, req sluice.Limit) *storev1.Decision {
	p := &storev1.Decision{
		Allowed:         d.Allowed,
		Degraded:        d.Degraded,
		Remaining:       int64(d.Remaining),
		RetryAfterNanos: int64(d.RetryAfter),
		ResetAfterNanos: int64(d.ResetAfter),
	}
	if d.Limit != req {
		p.Limit = Limit(d.Limit)
	}
	return p
}

// ToDecision is the sluice.Decision of p, answering a request of limit req.
func ToDecision(p *storev1.Decision, req sluice.Limit) sluice.Decision {
	d := sluice.Decision{
		Allowed:    p.GetAllowed(),
		Degraded:   p.GetDegraded(),
		Limit:      req,
		Remaining:  int(p.GetRemaining()),
		RetryAfter: time.Duration(p.GetRetryAfterNanos()),
		ResetAfter: time.Duration(p.GetResetAfterNanos()),
	}
	if l := p.GetLimit(); l != nil {
		if lim, err := ToLimit(l); err == nil {
			d.Limit = lim
		}
	}
	return d
}

// Time is t on the wire: nil for the zero time.
func Time(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// ToTime is the time of ts, the zero time for nil. A timestamp beyond the
// range of time.Time is clamped by time.Unix's arithmetic; none such is
// ever sent by a store.
func ToTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return time.Unix(ts.GetSeconds(), int64(ts.GetNanos()))
}

// Concurrency is lim, normalized, on the wire.
func Concurrency(lim sluice.ConcurrencyLimit) *storev1.ConcurrencyLimit {
	lim = lim.Normalize()
	return &storev1.ConcurrencyLimit{Max: int64(lim.Max), TtlNanos: int64(lim.TTL)}
}

// ToConcurrency is the sluice.ConcurrencyLimit of p, or a
// *sluice.LimitError on "Max" for a Max beyond int.
func ToConcurrency(p *storev1.ConcurrencyLimit) (sluice.ConcurrencyLimit, error) {
	if !fitsInt(p.GetMax()) {
		return sluice.ConcurrencyLimit{}, badField("Max", "Max %d is out of range", p.GetMax())
	}
	return sluice.ConcurrencyLimit{Max: int(p.GetMax()), TTL: time.Duration(p.GetTtlNanos())}, nil
}

// Permit is d on the wire; its limit is left out when it is req.
func Permit(d sluice.PermitDecision, req sluice.ConcurrencyLimit) *storev1.PermitDecision {
	p := &storev1.PermitDecision{
		Acquired:        d.Acquired,
		Degraded:        d.Degraded,
		Held:            int64(d.Held),
		Expires:         Time(d.Expires),
		RetryAfterNanos: int64(d.RetryAfter),
	}
	if d.Limit != req {
		p.Limit = Concurrency(d.Limit)
	}
	return p
}

// ToPermit is the sluice.PermitDecision of p, answering a request of limit
// req.
func ToPermit(p *storev1.PermitDecision, req sluice.ConcurrencyLimit) sluice.PermitDecision {
	d := sluice.PermitDecision{
		Acquired:   p.GetAcquired(),
		Degraded:   p.GetDegraded(),
		Held:       int(p.GetHeld()),
		Limit:      req,
		Expires:    ToTime(p.GetExpires()),
		RetryAfter: time.Duration(p.GetRetryAfterNanos()),
	}
	if l := p.GetLimit(); l != nil {
		if lim, err := ToConcurrency(l); err == nil {
			d.Limit = lim
		}
	}
	return d
}

// kinds are the sentinels by Error kind, in the order Status tries them.
var kinds = []struct {
	kind storev1.Error_Kind
	err  error
	code codes.Code
}{
	{storev1.Error_KIND_TOO_MANY_HOLDERS, sluice.ErrTooManyHolders, codes.InvalidArgument}, // before ErrExceedsCapacity, which it wraps
	{storev1.Error_KIND_INVALID_KEY, sluice.ErrInvalidKey, codes.InvalidArgument},
	{storev1.Error_KIND_INVALID_COST, sluice.ErrInvalidCost, codes.InvalidArgument},
	{storev1.Error_KIND_EXCEEDS_CAPACITY, sluice.ErrExceedsCapacity, codes.InvalidArgument},
	{storev1.Error_KIND_INVALID_LIMIT, sluice.ErrInvalidLimit, codes.InvalidArgument},
	{storev1.Error_KIND_MULTI_UNSUPPORTED, sluice.ErrMultiUnsupported, codes.Unimplemented},
	{storev1.Error_KIND_RESERVE_UNSUPPORTED, sluice.ErrReserveUnsupported, codes.Unimplemented},
	{storev1.Error_KIND_RESET_UNSUPPORTED, sluice.ErrResetUnsupported, codes.Unimplemented},
	{storev1.Error_KIND_SEMAPHORE_UNSUPPORTED, sluice.ErrSemaphoreUnsupported, codes.Unimplemented},
	{storev1.Error_KIND_GRANT_UNSUPPORTED, sluice.ErrGrantUnsupported, codes.Unimplemented},
}

// Status is a store's error as a gRPC status error: an invalid request
// (a *sluice.LimitError, or an error wrapping one of its sentinels) is
// InvalidArgument and a capability the store lacks Unimplemented, each
// with an Error detail that ToError turns back into the same error; a
// context's end is Canceled or DeadlineExceeded; anything else (the store
// did not answer, is closed, failed) is Unavailable, which a client counts
// as a failure of the store.
func Status(err error) error { return StatusWith(err) }

// StatusWith is Status with more details: the decision that a store
// returned together with its error (failover's degraded Extend), which
// PermitOf reads back.
func StatusWith(err error, details ...protoadapt.MessageV1) error {
	if err == nil {
		return nil
	}
	with := func(code codes.Code, details ...protoadapt.MessageV1) error {
		st := status.New(code, err.Error())
		if len(details) == 0 {
			return st.Err()
		}
		if sd, derr := st.WithDetails(details...); derr == nil {
			st = sd
		}
		return st.Err()
	}
	for _, k := range kinds {
		if !errors.Is(err, k.err) {
			continue
		}
		detail := &storev1.Error{Kind: k.kind, Reason: err.Error()}
		var le *sluice.LimitError
		if errors.As(err, &le) {
			detail.Field, detail.Reason = le.Field, le.Reason
		}
		return with(k.code, append(details, detail)...)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return with(codes.Canceled, details...)
	case errors.Is(err, context.DeadlineExceeded):
		return with(codes.DeadlineExceeded, details...)
	}
	return with(codes.Unavailable, details...)
}

// PermitOf returns the PermitDecision that StatusWith put in err's
// details, answering a request of limit req, and whether there was one.
func PermitOf(err error, req sluice.ConcurrencyLimit) (sluice.PermitDecision, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return sluice.PermitDecision{}, false
	}
	for _, d := range st.Details() {
		if p, ok := d.(*storev1.PermitDecision); ok {
			return ToPermit(p, req), true
		}
	}
	return sluice.PermitDecision{}, false
}

// ToError turns a status that Status made from a request's or a
// capability's error back into that error: its text is the store's, and
// it wraps a *sluice.LimitError with its Field and Reason (wrapping its
// sentinel), or the capability's sentinel. It returns nil for any other
// error.
func ToError(err error) error {
	st, ok := status.FromError(err)
	if !ok || (st.Code() != codes.InvalidArgument && st.Code() != codes.Unimplemented) {
		return nil
	}
	for _, d := range st.Details() {
		e, ok := d.(*storev1.Error)
		if !ok {
			continue
		}
		var inner error
		switch k := e.GetKind(); k {
		case storev1.Error_KIND_INVALID_LIMIT:
			inner = &sluice.LimitError{Field: e.GetField(), Reason: e.GetReason()}
		case storev1.Error_KIND_INVALID_KEY, storev1.Error_KIND_INVALID_COST, storev1.Error_KIND_EXCEEDS_CAPACITY:
			inner = &sluice.LimitError{Field: e.GetField(), Reason: e.GetReason(), Err: sentinel(k)}
		case storev1.Error_KIND_MULTI_UNSUPPORTED, storev1.Error_KIND_RESERVE_UNSUPPORTED,
			storev1.Error_KIND_RESET_UNSUPPORTED, storev1.Error_KIND_SEMAPHORE_UNSUPPORTED,
			storev1.Error_KIND_GRANT_UNSUPPORTED, storev1.Error_KIND_TOO_MANY_HOLDERS:
			inner = sentinel(k)
		default:
			continue
		}
		if st.Message() == inner.Error() {
			return inner
		}
		return &storeError{msg: st.Message(), err: inner}
	}
	return nil
}

// storeError is an error of the serving store: its text, and the error
// callers match (a *sluice.LimitError, a sentinel).
type storeError struct {
	msg string
	err error
}

func (e *storeError) Error() string { return e.msg }
func (e *storeError) Unwrap() error { return e.err }

// Unsupported is the error of a capability the store at where lacks.
func Unsupported(sentinel error, where string) error {
	return fmt.Errorf("%w: %s", sentinel, where)
}

func sentinel(k storev1.Error_Kind) error {
	for _, e := range kinds {
		if e.kind == k {
			return e.err
		}
	}
	return nil
}

// GrantRequest is r, for key and lim, on the wire.
func GrantRequest(key string, lim sluice.Limit, r sluice.GrantRequest) *storev1.GrantRequest {
	p := &storev1.GrantRequest{
		Key:       []byte(key),
		Limit:     Limit(lim),
		Holder:    []byte(r.Holder),
		N:         int64(r.N),
		Demand:    int64(r.Demand),
		Allowance: int64(r.Allowance),
		TtlNanos:  int64(r.TTL),
		NotAfter:  Time(r.NotAfter),
		Spent:     int64(r.Spent),
	}
	if !r.SpentWindow.IsZero() {
		p.SpentWindow = Time(r.SpentWindow)
	}
	return p
}

// ToGrantRequest is the sluice.GrantRequest of p, or a *sluice.LimitError
// naming the first field that Go's types cannot hold or that is beyond
// its bound (validate.Grant checks the rest, against the limit). The
// holder is checked before it is copied.
func ToGrantRequest(p *storev1.GrantRequest) (sluice.GrantRequest, error) {
	var r sluice.GrantRequest
	if h := p.GetHolder(); len(h) == 0 || len(h) > sluice.MaxGrantHolderLen {
		return r, badField("Holder", "holder is %d bytes, want 1 to %d", len(h), sluice.MaxGrantHolderLen)
	}
	switch {
	case p.GetN() < 0:
		return r, &sluice.LimitError{Field: "N", Reason: fmt.Sprintf("n = %d must be >= 0", p.GetN()), Err: sluice.ErrInvalidCost}
	case !fitsInt(p.GetN()):
		return r, &sluice.LimitError{Field: "N", Reason: fmt.Sprintf("n = %d is out of range", p.GetN()), Err: sluice.ErrExceedsCapacity}
	case p.GetDemand() < 0 || p.GetDemand() > sluice.MaxCharge:
		return r, badField("Demand", "demand = %d, want 0 to %d", p.GetDemand(), sluice.MaxCharge)
	case p.GetAllowance() < 0 || !fitsInt(p.GetAllowance()):
		return r, badField("Allowance", "allowance = %d, want 0 to the Rate", p.GetAllowance())
	case p.GetSpent() < 0 || !fitsInt(p.GetSpent()):
		return r, badField("Spent", "spent = %d, want 0 to the Rate", p.GetSpent())
	case p.GetTtlNanos() < int64(sluice.MinGrantTTL) || p.GetTtlNanos() > int64(sluice.MaxGrantTTL):
		return r, badField("TTL", "TTL = %v, want %v to %v", time.Duration(p.GetTtlNanos()), sluice.MinGrantTTL, sluice.MaxGrantTTL)
	}
	for _, ts := range []struct {
		field string
		ts    *timestamppb.Timestamp
	}{{"NotAfter", p.GetNotAfter()}, {"SpentWindow", p.GetSpentWindow()}} {
		if ts.ts != nil {
			if err := ts.ts.CheckValid(); err != nil {
				return r, badField(ts.field, "%s is not a valid time: %v", ts.field, err)
			}
		}
	}
	return sluice.GrantRequest{
		Holder:      string(p.GetHolder()),
		N:           int(p.GetN()),
		Demand:      int(p.GetDemand()),
		Allowance:   int(p.GetAllowance()),
		TTL:         time.Duration(p.GetTtlNanos()),
		NotAfter:    ToTime(p.GetNotAfter()),
		Spent:       int(p.GetSpent()),
		SpentWindow: ToTime(p.GetSpentWindow()),
	}, nil
}

// GrantResponse is g, answering a request of limit req, on the wire.
func GrantResponse(g sluice.Grant, req sluice.Limit) *storev1.GrantResponse {
	return &storev1.GrantResponse{
		Decision:  Decision(g.Decision, req),
		Units:     int64(g.Units),
		At:        Time(g.At),
		Share:     int64(g.Share),
		Allowance: int64(g.Allowance),
		Taken:     int64(g.Taken),
		Holders:   int64(g.Holders),
		Window:    Time(g.Window),
		Stale:     g.Stale,
	}
}

// ToGrant is the sluice.Grant of p, answering a request of limit req.
func ToGrant(p *storev1.GrantResponse, req sluice.Limit) sluice.Grant {
	return sluice.Grant{
		Decision:  ToDecision(p.GetDecision(), req),
		Units:     int(p.GetUnits()),
		At:        ToTime(p.GetAt()),
		Share:     int(p.GetShare()),
		Allowance: int(p.GetAllowance()),
		Taken:     int(p.GetTaken()),
		Holders:   int(p.GetHolders()),
		Window:    ToTime(p.GetWindow()),
		Stale:     p.GetStale(),
	}
}

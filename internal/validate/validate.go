// Package validate checks a request as every store must before deciding,
// so that each store reports a bad key, limit or cost with the same error.
package validate

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
)

// Request checks a key, limit and cost: a *sluice.LimitError wrapping
// sluice.ErrInvalidKey, ErrInvalidLimit, ErrInvalidCost or
// ErrExceedsCapacity, naming the offending field and value.
func Request(key string, lim sluice.Limit, n int) error {
	if err := sluice.ValidateKey(key); err != nil {
		return err
	}
	if err := lim.Validate(); err != nil {
		return err
	}
	return Cost(lim, n)
}

// Cost checks n against a limit that passed Validate.
func Cost(lim sluice.Limit, n int) error {
	if n < 0 {
		return &sluice.LimitError{Field: "N", Reason: fmt.Sprintf("n = %d must be >= 0", n), Err: sluice.ErrInvalidCost}
	}
	if lim.Counting == sluice.CountAll {
		if n > sluice.MaxCharge {
			return &sluice.LimitError{Field: "N", Reason: fmt.Sprintf("n = %d, but a charge is at most %d", n, sluice.MaxCharge), Err: sluice.ErrExceedsCapacity}
		}
		return nil
	}
	if c := lim.Capacity(); n > c {
		return &sluice.LimitError{Field: "N", Reason: fmt.Sprintf("n = %d, but %v admits at most %d at once", n, lim, c), Err: sluice.ErrExceedsCapacity}
	}
	return nil
}

// Multi checks the size of an AllowMulti call: at most
// sluice.MaxMultiRequests requests. An oversized call is a
// *sluice.LimitError wrapping sluice.ErrExceedsCapacity: it could never be
// decided at once. It does not check each request (Request does).
func Multi(reqs []sluice.Request) error {
	if len(reqs) > sluice.MaxMultiRequests {
		return &sluice.LimitError{Field: "Requests", Reason: fmt.Sprintf("AllowMulti of %d requests, more than %d at once", len(reqs), sluice.MaxMultiRequests), Err: sluice.ErrExceedsCapacity}
	}
	return nil
}

// IsInput reports an error about the request (its key, limit or cost)
// rather than about the store that was asked: what Request, Cost and Multi
// return.
func IsInput(err error) bool {
	return errors.Is(err, sluice.ErrInvalidLimit) || errors.Is(err, sluice.ErrInvalidKey) ||
		errors.Is(err, sluice.ErrInvalidCost) || errors.Is(err, sluice.ErrExceedsCapacity)
}

// Grant checks a grant request (sluice.Granter) against its bounds: the
// key, the limit (a window algorithm or a bucket, counting admitted hits),
// then each field of r, naming the first one out of bounds.
func Grant(key string, lim sluice.Limit, r sluice.GrantRequest) error {
	if err := sluice.ValidateKey(key); err != nil {
		return err
	}
	if err := lim.Validate(); err != nil {
		return err
	}
	bad := func(field, format string, args ...any) error {
		return &sluice.LimitError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case lim.Algorithm == sluice.SlidingLog:
		return bad("Algorithm", "a grant cannot be made of a sliding_log limit (one entry per unit); use sliding_window")
	case lim.Counting == sluice.CountAll:
		return bad("Counting", "a grant cannot be made of a limit that counts every hit: its hits must each reach the store")
	case r.Holder == "" || len(r.Holder) > sluice.MaxGrantHolderLen:
		return bad("Holder", "holder is %d bytes, want 1 to %d", len(r.Holder), sluice.MaxGrantHolderLen)
	case r.N < 0:
		return &sluice.LimitError{Field: "N", Reason: fmt.Sprintf("n = %d must be >= 0", r.N), Err: sluice.ErrInvalidCost}
	case r.N > lim.Capacity():
		return &sluice.LimitError{Field: "N", Reason: fmt.Sprintf("n = %d, but %v admits at most %d at once", r.N, lim, lim.Capacity()), Err: sluice.ErrExceedsCapacity}
	case r.Demand < 0 || r.Demand > sluice.MaxCharge:
		return bad("Demand", "demand = %d, want 0 to %d", r.Demand, sluice.MaxCharge)
	case r.Allowance < 0 || r.Allowance > lim.Rate:
		return bad("Allowance", "allowance = %d, want 0 to the Rate (%d)", r.Allowance, lim.Rate)
	case r.TTL < sluice.MinGrantTTL || r.TTL > sluice.MaxGrantTTL:
		return bad("TTL", "TTL = %v, want %v to %v", r.TTL, sluice.MinGrantTTL, sluice.MaxGrantTTL)
	case r.Spent < 0 || r.Spent > lim.Rate:
		return bad("Spent", "spent = %d, want 0 to the Rate (%d)", r.Spent, lim.Rate)
	}
	return nil
}

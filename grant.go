package sluice

import (
	"context"
	"errors"
	"time"
)

// Granter is a store that grants units of a limit to holders that share
// it, each a process or a fleet (a region) deciding for itself from the
// units it holds: package region takes its units from one. A grant is
// counted by the limit's algorithm when it is made, as a Reserve is, so
// whatever the holders do with their units, the store never admits more
// than the algorithm allows. On top of that, the store keeps per key a
// small table of its holders (at most MaxGrantHolders), which each grant
// updates in the same atomic step and which sizes it:
//
//   - Demand: each request reports the holder's demand, units per
//     Period it would use. Each holder's Share of a window (the limit's
//     Rate per epoch-aligned window of its Period, as a fixed window
//     counts) is its fair share of the Rate by demand, among the holders
//     that reported within the last second: its demand and an equal part
//     of what is left when the demands fit, max-min fair when they do
//     not. A holder silent for longer (idle, or cut off) has no share
//     until it reports again. A holder is granted at most max(Share, Allowance)
//     units in a window: a quiet holder gives back, a busy one gets more,
//     and under saturation every holder gets an equal part.
//   - Allowance: a holder may ask the store to reserve units for its
//     failure mode: while cut off from the store it may admit, in each
//     window, up to its Allowance less the units it was granted in that
//     window, and the other holders are never granted that room: Σ over
//     holders of max(units taken in the window, Allowance) stays within
//     the Rate. So what the holders admit together in a window, granted
//     units and failure-mode admissions alike, stays within the Rate.
//     An allowance is cut only when its holder asks for less, and grows
//     only into room that no holder's taken units or allowance hold, so a
//     holder that lost an answer can count on the smaller of its last
//     confirmed Allowance and what it asked for since.
//   - TTL: a holder's row, its allowance with it, lasts TTL after the
//     store receives its report; a holder stops relying on its allowance
//     TTL after it sent the report that the store last confirmed.
//
// A grant's units are admitted at its time At: for the window
// algorithms, spend them only within the window of At (a holder measures
// that locally from before it sent the request); for the buckets, within
// the holder's own lease time (the bound widens by that time, as for
// tiered's stamped leases).
//
// Grant supports FixedWindow, SlidingWindow, TokenBucket and GCRA limits
// that count admitted hits (a sliding log or a limit counting every hit
// is a *LimitError); memstore and redisstore implement it with the same
// numbers. A store that cannot grant returns an error wrapping
// ErrGrantUnsupported.
type Granter interface {
	Store
	Grant(ctx context.Context, key string, lim Limit, r GrantRequest) (Grant, error)
}

// GrantRequest is one holder's request and report. Every field is
// checked, against the bounds named, before any lock or script.
type GrantRequest struct {
	// Holder names the holder: 1 to MaxGrantHolderLen bytes.
	Holder string
	// N is the number of units wanted now, 0 to the limit's capacity
	// (Rate, or Burst for the buckets). The store grants what it can, 0
	// to N: no retry at a smaller size is needed. N = 0 only reports.
	N int
	// Demand is the holder's demand, units per Period (what it was asked
	// for, admitted or not), 0 to MaxCharge.
	Demand int
	// Allowance is the units per window the holder wants reserved for its
	// failure mode, 0 to the limit's Rate (0 for FailClosed).
	Allowance int
	// TTL is how long the report stands, MinGrantTTL to MaxGrantTTL.
	TTL time.Duration
	// NotAfter, when not zero, is the latest time (the store's clock) at
	// which the request may be applied: a request that arrives later (held
	// in a network that was cut off) changes nothing, and its Grant says
	// Stale. Clock skew between the holder and the store only moves the
	// cut-off; a holder never spends a late answer's units anyway.
	NotAfter time.Time
	// Spent is the units the holder admitted on its own (by its failure
	// mode, without a grant) in the window starting at SpentWindow: when
	// that window is the store's current one, they are counted in the
	// holder's taken units, so that it is not granted its allowance twice
	// in a window. 0 to the limit's Rate.
	Spent       int
	SpentWindow time.Time
}

// Grant is a Granter's answer.
type Grant struct {
	// Decision: Allowed when Units > 0 (or N was 0); Remaining is what the
	// algorithm could still admit now; RetryAfter, when nothing was granted
	// of N > 0, is the wait after which the binding rule may allow a unit,
	// absent other traffic (the algorithm's wait for one unit, or the end
	// of the window when the holder's share or the others' allowances
	// bound it); ResetAfter is the algorithm's.
	Decision
	// Units is the number granted, 0 to N, admitted at At.
	Units int
	// At is the store's time of the grant (its window for the window
	// algorithms).
	At time.Time
	// Share is the holder's fair share of a window by demand; Allowance
	// the reserve the store holds for it; Taken its units in the current
	// window, this grant's included; Holders the live holders of the key.
	Share, Allowance, Taken, Holders int
	// Window is the start of the store's current window (of the limit's
	// Period, epoch-aligned).
	Window time.Time
	// Stale reports a request that arrived after its NotAfter: nothing was
	// applied or granted.
	Stale bool
}

// Bounds of a grant.
const (
	// MaxGrantHolders bounds the holders of one key (per algorithm and
	// period): a grant for a new holder beyond it is refused with
	// ErrTooManyHolders. A holder's row leaves with its TTL.
	MaxGrantHolders = 64
	// MaxGrantHolderLen bounds a grant holder's name, in bytes.
	MaxGrantHolderLen = 64
	// MinGrantTTL and MaxGrantTTL bound a report's TTL.
	MinGrantTTL = time.Millisecond
	MaxGrantTTL = time.Hour
)

// ErrGrantUnsupported is returned by the Grant of a store that cannot
// grant.
var ErrGrantUnsupported = errors.New("sluice: store does not support Grant")

// ErrTooManyHolders is returned by a Grant for a new holder of a key that
// has MaxGrantHolders live holders. It wraps ErrExceedsCapacity, as input that
// can never be served now.
var ErrTooManyHolders = &LimitError{Field: "Holder", Reason: "the key has MaxGrantHolders (64) live holders", Err: ErrExceedsCapacity}

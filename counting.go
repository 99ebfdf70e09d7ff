package sluice

import "math"

// Counting says which hits a Limit records. The zero value, CountAdmitted,
// records only what it admits: a denied request leaves the key as it was.
//
// CountAll records every hit, also one the limit denies and one larger
// than its capacity: a charge made after the work is done (the tokens an
// LLM response used, the bytes a download sent) is never lost, however far
// it overdraws the budget. The limit then denies, a cost of 0 included,
// until time has repaid the debt, exactly per algorithm: a fixed or sliding
// window's count above its Rate waits for its windows to move on, a token
// bucket's or GCRA's theoretical arrival time beyond its Burst waits for
// it. This is envoyproxy/ratelimit's counting. SlidingLog cannot count
// beyond its Rate (it keeps one entry per admitted unit) and rejects
// CountAll in Validate.
type Counting uint8

const (
	// CountAdmitted records admitted hits only; the default.
	CountAdmitted Counting = iota
	// CountAll records every hit, admitted or denied.
	CountAll
)

// MaxCharge is the largest n a CountAll request may charge at once, the
// largest hits_addend Envoy sends. A CountAdmitted request is bounded by
// the limit's Capacity instead. The debt a key accumulates is bounded by
// the stores (docs/bounds.md), so that no sequence of charges overflows a
// counter.
const MaxCharge = math.MaxInt32

var countings = enum[Counting]{
	typ:  "Counting",
	noun: "counting",
	names: []string{
		CountAdmitted: "admitted",
		CountAll:      "all",
	},
	want: "admitted or all",
}

func (c Counting) valid() bool { return countings.valid(c) }

// String returns the counting's configuration name: admitted or all.
func (c Counting) String() string { return countings.String(c) }

// ParseCounting parses admitted or all (and the empty string, for
// CountAdmitted).
func ParseCounting(s string) (Counting, error) {
	if s == "" {
		return CountAdmitted, nil
	}
	return countings.parse(s)
}

// MarshalText implements encoding.TextMarshaler.
func (c Counting) MarshalText() ([]byte, error) { return countings.marshal(c) }

// UnmarshalText implements encoding.TextUnmarshaler.
func (c *Counting) UnmarshalText(b []byte) error {
	v, err := ParseCounting(string(b))
	if err == nil {
		*c = v
	}
	return err
}

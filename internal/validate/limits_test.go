package validate_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

// TestLimitsCheck: Limits.Check answers as Request does, whether the limit
// is cached or not, and never caches an invalid limit.
func TestLimitsCheck(t *testing.T) {
	var c validate.Limits
	gcra := sluice.PerSecond(10)
	tests := []struct {
		key string
		lim sluice.Limit
		n   int
	}{
		{"k", gcra, 1},
		{"k", gcra, 10},
		{"k", gcra, 11},
		{"k", gcra, -1},
		{"", gcra, 1},
		{"k", sluice.Limit{Algorithm: sluice.GCRA, Period: time.Second}, 1},
		{"k", sluice.Limit{Rate: 1, Period: time.Second}, 1},
		{"k", gcra.WithCounting(sluice.CountAll), sluice.MaxCharge},
		{"k", gcra.WithCounting(sluice.CountAll), sluice.MaxCharge + 1},
		{"k", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: time.Second, Counting: sluice.CountAll}, 1},
	}
	for round := range 2 { // the second round finds the valid limits cached
		for _, tt := range tests {
			want := validate.Request(tt.key, tt.lim, tt.n)
			p, got := c.Check(tt.key, tt.lim, tt.n)
			if fmt.Sprint(got) != fmt.Sprint(want) || (got == nil) != (p != nil) {
				t.Errorf("round %d: Check(%q, %v, %d) = %v, %v; want %v", round, tt.key, tt.lim, tt.n, p, got, want)
			}
			if got == nil && p.Cap != int64(tt.lim.Capacity()) {
				t.Errorf("Check(%v).Cap = %d, want %d", tt.lim, p.Cap, tt.lim.Capacity())
			}
		}
	}
}

// TestLimitsMany: more limits than the cache holds are all checked right,
// those that were evicted validated again.
func TestLimitsMany(t *testing.T) {
	var c validate.Limits
	for round := range 3 {
		for r := 1; r <= 500; r++ {
			lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: r, Period: time.Second}
			p, err := c.Check("k", lim, r)
			if err != nil || p.Rate != int64(r) {
				t.Fatalf("round %d: Check(%v, %d) = %+v, %v", round, lim, r, p, err)
			}
			if _, err := c.Check("k", lim, r+1); !errors.Is(err, sluice.ErrExceedsCapacity) {
				t.Fatalf("round %d: Check(%v, %d) = %v, want ErrExceedsCapacity", round, lim, r+1, err)
			}
		}
	}
}

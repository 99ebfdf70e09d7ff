package validate_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

// TestValidateMulti: an AllowMulti call of MaxMultiRequests requests, or of
// MaxSlidingLogRate sliding-log units in all, is valid; one more request or
// unit is ErrExceedsCapacity.
func TestValidateMulti(t *testing.T) {
	logLim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: sluice.MaxSlidingLogRate, Period: time.Second}
	reqs := func(n int, lim sluice.Limit, cost func(i int) int) []sluice.Request {
		r := make([]sluice.Request, n)
		for i := range r {
			r[i] = sluice.Request{Key: fmt.Sprint("k", i), Limit: lim, N: cost(i)}
		}
		return r
	}
	one := func(int) int { return 1 }
	units := func(total int) func(int) int {
		return func(i int) int {
			if i == 0 {
				return total - 2
			}
			return 1
		}
	}
	tests := []struct {
		name string
		reqs []sluice.Request
		ok   bool
	}{
		{"no request", nil, true},
		{"MaxMultiRequests", reqs(sluice.MaxMultiRequests, sluice.PerSecond(5), one), true},
		{"one request more", reqs(sluice.MaxMultiRequests+1, sluice.PerSecond(5), one), false},
		{"MaxSlidingLogRate units", reqs(3, logLim, units(sluice.MaxSlidingLogRate)), true},
		{"one unit more", reqs(3, logLim, units(sluice.MaxSlidingLogRate+1)), false},
		{"a huge cost does not overflow", reqs(3, logLim, func(int) int { return int(^uint(0) >> 1) }), false},
		{"other algorithms have no unit bound", reqs(3, sluice.PerSecond(1000), func(int) int { return 1000 }), true},
	}
	for _, tt := range tests {
		err := validate.Multi(tt.reqs)
		if tt.ok && err != nil || !tt.ok && !errors.Is(err, sluice.ErrExceedsCapacity) {
			t.Errorf("%s: ValidateMulti = %v, want ok %v (else ErrExceedsCapacity)", tt.name, err, tt.ok)
		}
	}
}

package validate_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

// TestValidateMulti: an AllowMulti call of MaxMultiRequests requests is
// valid, whatever their costs; one more request is ErrExceedsCapacity.
func TestValidateMulti(t *testing.T) {
	logLim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100_000, Period: time.Hour}
	reqs := func(n int, lim sluice.Limit, cost func(i int) int) []sluice.Request {
		r := make([]sluice.Request, n)
		for i := range r {
			r[i] = sluice.Request{Key: fmt.Sprint("k", i), Limit: lim, N: cost(i)}
		}
		return r
	}
	one := func(int) int { return 1 }
	tests := []struct {
		name string
		reqs []sluice.Request
		ok   bool
	}{
		{"no request", nil, true},
		{"MaxMultiRequests", reqs(sluice.MaxMultiRequests, sluice.PerSecond(5), one), true},
		{"one request more", reqs(sluice.MaxMultiRequests+1, sluice.PerSecond(5), one), false},
		{"sliding logs have no unit bound", reqs(sluice.MaxMultiRequests, logLim, func(int) int { return 100_000 }), true},
	}
	for _, tt := range tests {
		err := validate.Multi(tt.reqs)
		if tt.ok && err != nil || !tt.ok && !errors.Is(err, sluice.ErrExceedsCapacity) {
			t.Errorf("%s: ValidateMulti = %v, want ok %v (else ErrExceedsCapacity)", tt.name, err, tt.ok)
		}
	}
}

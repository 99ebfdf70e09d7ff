package metrics

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBreakerGaugeTwoBreakers: with two breakers reporting (Redis's and
// the per-second Redis's), sluice_breaker_open stays 1 until both closed.
func TestBreakerGaugeTwoBreakers(t *testing.T) {
	m := New()
	steps := []struct {
		open bool
		want float64
	}{{true, 1}, {true, 1}, {false, 1}, {false, 0}, {true, 1}, {false, 0}}
	for i, s := range steps {
		if s.open {
			m.BreakerOpened(errors.New("down"))
		} else {
			m.BreakerClosed(0)
		}
		if got := testutil.ToFloat64(m.breaker); got != s.want {
			t.Fatalf("step %d (open %v): sluice_breaker_open = %v, want %v", i, s.open, got, s.want)
		}
	}
}

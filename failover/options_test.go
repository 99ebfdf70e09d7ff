package failover_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

// An invalid option value is an error of New naming the option.
func TestInvalidOptions(t *testing.T) {
	tests := []struct {
		opt  failover.Option
		want string
	}{
		{failover.WithTimeout(0), "WithTimeout(0s): want > 0"},
		{failover.WithTimeout(-time.Second), "WithTimeout(-1s)"},
		{failover.WithFailureThreshold(0), "WithFailureThreshold(0): want >= 1"},
		{failover.WithErrorRate(-0.1, time.Second, 1), "WithErrorRate(-0.1, 1s, 1): want a ratio"},
		{failover.WithErrorRate(1.5, time.Second, 1), "WithErrorRate(1.5"},
		{failover.WithErrorRate(math.NaN(), time.Second, 1), "WithErrorRate(NaN"},
		{failover.WithErrorRate(0.5, 0, 1), "want a window > 0"},
		{failover.WithErrorRate(0.5, time.Second, 0), "want minCalls >= 1"},
		{failover.WithProbeInterval(0), "WithProbeInterval(0s): want > 0"},
		{failover.WithProbeKey(""), `WithProbeKey("")`},
		{failover.WithDefaultMode(sluice.FailDefault), "WithDefaultMode(default): want closed, error, open, uncounted or open_unbounded"},
		{failover.WithDefaultMode(9), "WithDefaultMode(FailureMode(9))"},
		{failover.WithReplicas(0), "WithReplicas(0): want >= 1"},
		{failover.WithObserver(nil), "WithObserver(nil)"},
		{failover.WithLogger(nil), "WithLogger(nil)"},
		{failover.WithClock(nil), "WithClock(nil)"},
		{failover.WithLocalMaxKeys(0), "WithLocalMaxKeys(0): want >= 1"},
	}
	m := memstore.New()
	defer m.Close()
	for _, tt := range tests {
		s, err := failover.New(m, tt.opt)
		if err == nil || s != nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "failover: ") {
			t.Errorf("New with an invalid option = %v, %v; want an error containing %q", s, err, tt.want)
		}
	}
	if _, err := failover.New(nil); err == nil {
		t.Error("New(nil) succeeded, want an error")
	}
	// Valid edge values.
	for _, o := range []failover.Option{failover.WithErrorRate(0, 0, 0), failover.WithErrorRate(1, time.Second, 1), failover.WithStartOpen(nil)} {
		s, err := failover.New(m, o)
		if err != nil {
			t.Errorf("New with a valid option: %v", err)
			continue
		}
		s.Close()
	}
}

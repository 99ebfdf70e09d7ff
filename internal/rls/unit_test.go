package rls

import (
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/config"
)

// Every unit of the configuration is a unit of the protocol, and the
// reverse: an override's unit and a rule's current_limit speak the same
// units.
func TestUnitsMatchProtocol(t *testing.T) {
	if got, want := len(units), len(pb.RateLimitResponse_RateLimit_Unit_name)-1; got != want {
		t.Errorf("%d units, want the protocol's %d (all but UNKNOWN)", got, want)
	}
	for _, cu := range config.Units() {
		u := pb.RateLimitResponse_RateLimit_Unit(pb.RateLimitResponse_RateLimit_Unit_value[cu.Name])
		if u == pb.RateLimitResponse_RateLimit_UNKNOWN {
			t.Errorf("config unit %s is not a protocol unit", cu.Name)
		}
		if got := unitPeriod(u); got != cu.Period {
			t.Errorf("unitPeriod(%v) = %v, want %v", u, got, cu.Period)
		}
	}
	for i := 1; i < len(units); i++ {
		if units[i-1].d <= units[i].d {
			t.Errorf("units[%d] = %v is not longer than units[%d] = %v", i-1, units[i-1].d, i, units[i].d)
		}
	}
	if got := unitPeriod(pb.RateLimitResponse_RateLimit_UNKNOWN); got != 0 {
		t.Errorf("unitPeriod(UNKNOWN) = %v, want 0", got)
	}
}

// windowLeft counts in whole microseconds, as the stores place their
// windows.
func TestWindowLeft(t *testing.T) {
	epoch := time.Unix(1_700_000_040, 0) // a whole number of minutes
	tests := []struct {
		now  time.Time
		p    time.Duration
		want time.Duration
	}{
		{epoch, time.Minute, time.Minute},
		{epoch.Add(1500 * time.Millisecond), time.Second, 500 * time.Millisecond},
		{epoch.Add(59 * time.Second), time.Minute, time.Second},
		{epoch.Add(time.Microsecond + 999), time.Millisecond, 999 * time.Microsecond},
		{epoch.Add(999), time.Second, time.Second},                     // below a microsecond: the window's start
		{epoch.Add(300 * time.Millisecond), 0, 700 * time.Millisecond}, // no period: a second's
	}
	for _, tt := range tests {
		if got := windowLeft(tt.p, tt.now); got != tt.want {
			t.Errorf("windowLeft(%v, epoch+%v) = %v, want %v", tt.p, tt.now.Sub(epoch), got, tt.want)
		}
	}
}

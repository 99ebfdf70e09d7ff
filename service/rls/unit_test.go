package rls

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/service/config"
)

// Every unit of the configuration is a unit of the protocol, and the
// reverse: an override's unit and a rule's current_limit speak the same
// units.
func TestUnitsMatchProtocol(t *testing.T) {
	if got, want := len(config.Units()), len(pb.RateLimitResponse_RateLimit_Unit_name)-1; got != want {
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
	if got := unitPeriod(pb.RateLimitResponse_RateLimit_UNKNOWN); got != 0 {
		t.Errorf("unitPeriod(UNKNOWN) = %v, want 0", got)
	}
}
